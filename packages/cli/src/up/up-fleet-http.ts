/**
 * The fleet page of `cluster-proxy up` on 127.0.0.1 (docs/design/fleet-view.md, "Who sees what"):
 * without authentication, every viewer sees every cluster and the audit view (up has no audit
 * records: the list stays empty). `/` redirects to the page; the rest below `/-/fleet/` is
 * {@link FleetHttp}'s.
 */
import * as http from "@cluster-proxy/kit/http";
import { FLEET_PATH, FleetHttp, type FleetModel, type FleetViewer, type UiAssets } from "@cluster-proxy/fleet";

/** The local viewer: everything is visible. */
const EVERYONE: FleetViewer = {
  name: "local",
  visible: (clusters) => Promise.resolve(new Set(clusters)),
  auditable: (clusters) => Promise.resolve(new Set(clusters)),
};

/** The running fleet page. */
export interface UpFleetHttp {
  /** The page's address, e.g. `http://127.0.0.1:8096/-/fleet/`. */
  url: string;
  close(): Promise<void>;
}

/** Serve `model` on `host:port`; rejects (with the listen error) when the port is taken. */
export async function startUpFleetHttp(options: {
  model: FleetModel;
  host: string;
  port: number;
  /** The page's files (default: the built page). */
  assets?: UiAssets;
}): Promise<UpFleetHttp> {
  const fleet = new FleetHttp({
    model: options.model,
    identify: () => Promise.resolve({ ok: true, viewer: EVERYONE }),
    ...(options.assets ? { assets: options.assets } : {}),
  });
  const server = http.createServer((req, res) => {
    if (FleetHttp.owns(req.url)) {
      void fleet.handle(req, res);
      return;
    }
    if (req.url === "/") {
      res.writeHead(302, { location: FLEET_PATH, "content-length": 0 }).end();
      return;
    }
    const body = `not found: the fleet view is at ${FLEET_PATH}\n`;
    res.writeHead(404, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = address !== null && typeof address === "object" ? address.port : options.port;
  return {
    url: `http://${options.host}:${port}${FLEET_PATH}`,
    close: async () => {
      fleet.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

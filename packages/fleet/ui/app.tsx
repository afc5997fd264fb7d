/**
 * The fleet page: the table, the detail of the cluster the URL hash names, the live indicator and
 * the token form. One event stream at a time: `api/events` for the table, or
 * `api/events?cluster=<name>` while a detail is open (its `snapshot` events keep the table live).
 */
import { useEffect, useState } from "preact/hooks";
import type { ClusterDetail, FleetSnapshot } from "../src/fleet-types.js";
import { loadToken, saveToken } from "./auth.js";
import { ClusterDetailPanel } from "./cluster-detail.js";
import { FleetTable } from "./fleet-table.js";
import { eventsUrl, LiveStream, type LiveState } from "./live-stream.js";
import { closeCluster, clusterFromHash, openCluster } from "./route.js";
import { TokenForm } from "./token-form.js";

/** A DNS-1123 label, what a cluster name is (the server answers 400 to anything else). */
function isClusterName(name: string): boolean {
  return name.length <= 63 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name);
}

/** How often relative times ("5 min ago") are redrawn, ms. */
const TICK_MS = 10_000;

function useHashCluster(): string | null {
  const [cluster, setCluster] = useState(() => clusterFromHash(location.hash));
  useEffect(() => {
    const on = (): void => setCluster(clusterFromHash(location.hash));
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return cluster;
}

function useNow(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), TICK_MS);
    return () => clearInterval(t);
  }, []);
  return now;
}

/** The live indicator. */
function Live(props: { state: LiveState; why: string; waiting: boolean }) {
  const text = props.waiting ? "needs a token" : props.state === "live" ? "live" : "reconnecting…";
  return (
    <span
      class={`live live-${props.state}`}
      data-testid="live-indicator"
      data-state={props.state}
      role="status"
      title={props.why === "" ? undefined : props.why}
    >
      <span class="dot" aria-hidden="true" />
      {text}
    </span>
  );
}

/** The whole page. */
export function App() {
  const [token, setToken] = useState(loadToken);
  const [needToken, setNeedToken] = useState(false);
  const [snapshot, setSnapshot] = useState<FleetSnapshot | null>(null);
  const [detail, setDetail] = useState<ClusterDetail | null>(null);
  const [missing, setMissing] = useState<string | null>(null);
  const [live, setLive] = useState<{ state: LiveState; why: string }>({ state: "reconnecting", why: "connecting" });
  const cluster = useHashCluster();
  const now = useNow();
  const streamCluster = cluster !== null && isClusterName(cluster) ? cluster : null;

  useEffect(() => {
    if (needToken) return;
    const stream = new LiveStream(eventsUrl(streamCluster), token, {
      snapshot: setSnapshot,
      detail: (d) => {
        if (d === null) setMissing(streamCluster);
        else {
          setMissing(null);
          setDetail(d);
        }
      },
      state: (state, why) => setLive({ state, why }),
      unauthorized: () => {
        setLive({ state: "reconnecting", why: "401: a token is needed" });
        setNeedToken(true);
      },
    });
    stream.start();
    return () => stream.stop();
  }, [token, needToken, streamCluster]);

  // Escape closes the detail. One listener for the page's life, reading the URL when the key
  // comes, so a key pressed right after the detail opened is not missed.
  useEffect(() => {
    const onKey = (e: KeyboardEvent): void => {
      if (e.key !== "Escape" || clusterFromHash(location.hash) === null) return;
      e.preventDefault();
      closeCluster();
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, []);

  useEffect(() => {
    if (cluster !== null && !isClusterName(cluster)) setMissing(cluster);
  }, [cluster]);

  useEffect(() => {
    document.title = cluster === null ? "Fleet · cluster-proxy" : `${cluster} · Fleet · cluster-proxy`;
    if (cluster === null) setDetail(null);
  }, [cluster]);

  const submitToken = (t: string): void => {
    saveToken(t);
    setToken(t);
    setNeedToken(false);
  };
  const forgetToken = (): void => {
    saveToken(null);
    setToken(null);
    setSnapshot(null);
    setNeedToken(false);
  };

  return (
    <div class={cluster === null ? "app" : "app with-detail"}>
      <header class="bar">
        <h1>
          cluster-proxy <span class="sub">fleet</span>
        </h1>
        <Live state={live.state} why={live.why} waiting={needToken} />
        {snapshot !== null && (
          <span class="generated" title={snapshot.generated}>
            updated {new Date(snapshot.generated).toLocaleTimeString()}
          </span>
        )}
        {token !== null && (
          <button type="button" class="link" onClick={forgetToken}>
            Forget token
          </button>
        )}
      </header>
      <main>
        {needToken ? (
          <TokenForm refused={token !== null} submit={submitToken} />
        ) : snapshot === null ? (
          <p class="notice loading">Connecting…</p>
        ) : (
          <FleetTable rows={snapshot.clusters} now={now} selected={cluster} open={openCluster} />
        )}
      </main>
      {cluster !== null && !needToken && (
        <ClusterDetailPanel
          cluster={cluster}
          detail={detail}
          missing={missing === cluster}
          now={now}
          close={closeCluster}
        />
      )}
    </div>
  );
}

/** Kubernetes Events about the objects the manager reconciles, so `kubectl describe` shows what it did. */
import { randomBytes } from "node:crypto";
import { KubeResources, type KubeApi, type KubeObject } from "./kube-api.js";
import type { Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** Records Events as `component` (the Event's source and reporting component). */
export class EventRecorder {
  constructor(
    private readonly api: KubeApi,
    private readonly logger: Logger,
    private readonly component = "cluster-proxy-addon-manager",
  ) {}

  /** Record an event about `about`; failures are logged, never thrown. Cluster-scoped objects' events go to `default`. */
  async record(
    about: Pick<KubeObject, "apiVersion" | "kind" | "metadata">,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ): Promise<void> {
    const namespace = about.metadata.namespace ?? "default";
    const now = new Date().toISOString();
    try {
      await this.api.create(KubeResources.event, {
        metadata: { name: `${about.metadata.name}.${randomBytes(8).toString("hex")}`, namespace },
        involvedObject: {
          apiVersion: about.apiVersion,
          kind: about.kind,
          name: about.metadata.name,
          ...(about.metadata.namespace ? { namespace: about.metadata.namespace } : {}),
          ...(about.metadata.uid ? { uid: about.metadata.uid } : {}),
        },
        type,
        reason,
        message,
        source: { component: this.component },
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
        reportingComponent: this.component,
      });
    } catch (err) {
      this.logger.warn({ reason, err: errorMessage(err) }, "could not record an event");
    }
  }
}

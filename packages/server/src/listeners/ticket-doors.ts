/**
 * The proxy-server's session ticket keys at work (see ticket-keys.ts for the design): the TLS
 * options of each door's server and of its twin (the previous key), the pacer's routing of a
 * ClientHello by its ticket's key name, and the reload of --tls-session-ticket-key-file (polled
 * by content every --cert-reload-interval, like the certificates).
 */
import { createHash, randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import type * as tls from "node:tls";
import { ConfigError } from "@cluster-proxy/api";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Logger, type TimerHandle, type Timers } from "@cluster-proxy/kit";
import {
  TICKET_KEY_BYTES,
  doorSessionIdContext,
  doorTicketKey,
  parseTicketKeyFile,
  randomTicketKeys,
  ticketMadeWith,
  trustDigest,
  type TicketKeySet,
} from "./ticket-keys.js";

/** The agent port's ticket door (its keys' HKDF info and session id context). */
export const AGENT_TICKET_DOOR = "agent";

/** A door's TLS server and the twin that holds the previous key. */
interface DoorServers {
  primary: tls.Server;
  twin: tls.Server;
}

export interface ServerTicketKeysOptions {
  /** --tls-session-ticket-key-file ("" : random keys of this process). */
  file: string;
  /** --tls-session-ticket-lifetime (ms, > 0). */
  lifetimeMs: number;
  /** How often to re-read the file (ms; 0: never). */
  intervalMs: number;
  logger: Logger;
  /** Called per reload attempt of changed content. */
  onReload?: (result: "success" | "failure") => void;
  readFile?: (path: string) => Promise<Buffer>;
  /** The polls' timers (tests drive them; default the kit's `realClock`). */
  timers?: Timers;
}

function digest(content: Buffer): string {
  return createHash("sha256").update(content).digest("hex");
}

/** The ticket keys of a server's TLS doors; see the module comment. */
export class ServerTicketKeys {
  private readonly doors = new Map<string, DoorServers>();
  /** The digest of each door's CA file (see doorTicketKey); none: "". */
  private readonly trusts = new Map<string, string>();
  /** Keys by `<side>\0<door>` of the current key set and CA files (see derivedKey). */
  private readonly derivedKeys = new Map<string, Buffer>();
  /**
   * The side each ticket was found to be of, for its door, under the keys of {@link derivedKeys}
   * (replaced with them): the pacer asks twice per ClientHello (its cost, then its server), and
   * each answer is an HMAC.
   */
  private judged = new WeakMap<Buffer, { door: string; side: keyof DoorServers | undefined }>();
  /** A twin's key while the file has no previous key: matches no ticket. */
  private readonly noPrevious = randomBytes(TICKET_KEY_BYTES);
  private timer: TimerHandle;
  private refused: string | undefined;

  private constructor(
    private readonly options: ServerTicketKeysOptions,
    private keys: TicketKeySet,
    private loadedDigest: string,
  ) {}

  /** Read the key file (or make random keys without one); a ConfigError names the flag. */
  static async load(options: ServerTicketKeysOptions): Promise<ServerTicketKeys> {
    if (options.file === "") return new ServerTicketKeys(options, randomTicketKeys(), "");
    const read = options.readFile ?? readFile;
    let content: Buffer;
    try {
      content = await read(options.file);
    } catch (err) {
      throw new ConfigError(`--tls-session-ticket-key-file: cannot read "${options.file}": ${errorMessage(err)}`, {
        cause: err,
      });
    }
    try {
      return new ServerTicketKeys(options, parseTicketKeyFile(content), digest(content));
    } catch (err) {
      throw new ConfigError(`--tls-session-ticket-key-file: "${options.file}": ${errorMessage(err)}`, { cause: err });
    }
  }

  /** The key `door`'s server (`primary`) or its twin uses now. */
  key(door: string, which: keyof DoorServers): Buffer {
    const fileKey = which === "primary" ? this.keys.current : this.keys.previous;
    return fileKey ? doorTicketKey(fileKey, door, this.trusts.get(door)) : this.noPrevious;
  }

  /**
   * `doors` verify client certificates with `caFile` from now on: their keys are derived with its
   * digest, so a ticket whose full handshake trusted other CAs (a CA taken out of the file, or
   * another replica's file) is not resumed but gets a full handshake against these. Call it before
   * the doors' servers are created and after every reload of the file (then {@link apply}).
   */
  trust(doors: readonly string[], caFile: Buffer | undefined): void {
    const digest = trustDigest(caFile);
    for (const door of doors) {
      if (this.trusts.get(door) === digest) continue;
      this.trusts.set(door, digest);
      this.forgetDerivedKeys();
    }
  }

  /** The TLS options of `door`'s server or twin: its session id context, ticket lifetime and key. */
  tlsOptions(door: string, which: keyof DoorServers): tls.TlsOptions {
    return {
      sessionIdContext: doorSessionIdContext(door),
      sessionTimeout: Math.max(1, Math.floor(this.options.lifetimeMs / 1000)),
      ticketKeys: this.key(door, which),
    };
  }

  /** Put `door`'s servers under the keys (and their reloads). */
  register(door: string, primary: tls.Server, twin: tls.Server): void {
    this.doors.set(door, { primary, twin });
  }

  /** The pacer's route of `door`: the twin for a ticket of the previous key, else the door's server. */
  route(door: string): (ticket: Buffer) => tls.Server | undefined {
    return (ticket) => (this.sideOf(door, ticket) === "twin" ? this.doors.get(door)?.twin : undefined);
  }

  /**
   * The pacer's test of `door`'s tickets: whether one was made with the key of the door's server or
   * (with a previous key) its twin's, so that a server may resume it. Any other ticket is a full
   * handshake, including one that copies a real key's name: the ticket's HMAC is checked too.
   */
  resumable(door: string): (ticket: Buffer) => boolean {
    return (ticket) => this.sideOf(door, ticket) !== undefined;
  }

  /** Which of `door`'s servers holds the key `ticket` was made with (the twin only with a previous key); undefined: none. */
  private sideOf(door: string, ticket: Buffer): keyof DoorServers | undefined {
    if (!this.doors.has(door)) return undefined;
    const known = this.judged.get(ticket);
    if (known?.door === door) return known.side;
    const sides: (keyof DoorServers)[] = this.keys.previous ? ["primary", "twin"] : ["primary"];
    const side = sides.find((s) => ticketMadeWith(ticket, this.derivedKey(door, s)));
    this.judged.set(ticket, { door, side });
    return side;
  }

  /** The key set or a CA file changed: derive the keys again, and judge every ticket again. */
  private forgetDerivedKeys(): void {
    this.derivedKeys.clear();
    this.judged = new WeakMap();
  }

  /** `door`'s key for `side`, derived once per key set and CA file (not per ClientHello). */
  private derivedKey(door: string, side: keyof DoorServers): Buffer {
    const at = `${side}\u0000${door}`;
    let key = this.derivedKeys.get(at);
    if (!key) this.derivedKeys.set(at, (key = this.key(door, side)));
    return key;
  }

  /** Install the keys on every door (after a reload, or a certificate reload replaced the contexts). */
  apply(): void {
    for (const [door, servers] of this.doors) {
      servers.primary.setTicketKeys(this.key(door, "primary"));
      servers.twin.setTicketKeys(this.key(door, "twin"));
    }
  }

  /** Poll the file every `intervalMs` (no file or 0: never). */
  start(): void {
    if (this.options.file === "" || this.options.intervalMs <= 0 || this.timer !== undefined) return;
    this.arm();
  }

  stop(): void {
    if (this.timer !== undefined) (this.options.timers ?? realClock).clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The next poll `intervalMs` from now, armed as the poll begins (a steady beat, as an interval's). */
  private arm(): void {
    this.timer = (this.options.timers ?? realClock).setTimeout(() => {
      this.arm();
      void this.check();
    }, this.options.intervalMs);
  }

  /** Re-read the file; install changed keys that parse. Never throws. */
  async check(): Promise<"unchanged" | "reloaded" | "failed"> {
    if (this.options.file === "") return "unchanged";
    const { logger, file } = this.options;
    let content: Buffer;
    try {
      content = await (this.options.readFile ?? readFile)(file);
    } catch (err) {
      return this.refuse(`read:${errorMessage(err)}`, errorMessage(err));
    }
    const d = digest(content);
    if (d === this.loadedDigest) {
      this.refused = undefined;
      return "unchanged";
    }
    if (d === this.refused) return "failed";
    let keys: TicketKeySet;
    try {
      keys = parseTicketKeyFile(content);
    } catch (err) {
      return this.refuse(d, errorMessage(err));
    }
    this.keys = keys;
    this.forgetDerivedKeys();
    this.loadedDigest = d;
    this.refused = undefined;
    this.apply();
    logger.info(
      { file, previous: keys.previous !== undefined },
      "reloaded the TLS session ticket keys (tickets of the previous key still resume)",
    );
    this.options.onReload?.("success");
    return "reloaded";
  }

  private refuse(key: string, reason: string): "failed" {
    if (this.refused !== key) {
      this.refused = key;
      this.options.logger.error(
        { flag: "--tls-session-ticket-key-file", file: this.options.file, err: reason },
        "refused the new TLS session ticket keys; keeping the ones in use",
      );
      this.options.onReload?.("failure");
    }
    return "failed";
  }
}

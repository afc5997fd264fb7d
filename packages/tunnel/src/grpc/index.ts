export * from "./framing.js";
export * from "./status.js";
export * from "./stream.js";
export * from "./server.js";
export * from "./client.js";
export * from "./session.js";
export * from "./http-proxy.js";

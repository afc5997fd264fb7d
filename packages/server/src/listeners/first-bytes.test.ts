import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createTestPki } from "@cluster-proxy/pki/testing";
import { captureClientHello } from "@cluster-proxy/tunnel/testing";
import { classifyFirstBytes, clientHelloTicket, looksLikeTls } from "./first-bytes.js";
import { tlsSession } from "../testing/tls-session.js";

test("classifyFirstBytes: a ClientHello only when its whole first record is there; HTTP and other bytes at once", async () => {
  const hello = await captureClientHello();
  assert.equal(looksLikeTls(hello), true);
  assert.deepEqual(classifyFirstBytes(hello), { kind: "client-hello" });
  for (const cut of [1, 4, 5, 6, hello.length - 1]) {
    assert.deepEqual(classifyFirstBytes(hello.subarray(0, cut)), { kind: "incomplete" }, `first ${cut} bytes`);
  }
  assert.deepEqual(classifyFirstBytes(Buffer.alloc(0)), { kind: "incomplete" });
  for (const request of ["GET / HTTP/1.1\r\n", "CONNECT east:443 HTTP/1.1\r\n", "PRI * HTTP/2.0\r\n", "M-SEARCH * "]) {
    assert.deepEqual(classifyFirstBytes(Buffer.from(request)), { kind: "http" }, request);
  }
  assert.equal(classifyFirstBytes(Buffer.from("GE")).kind, "incomplete", "a method still arriving");
  assert.equal(classifyFirstBytes(Buffer.from("SSH-2.0-OpenSSH")).kind, "not-tls", "not a request line");
  assert.equal(classifyFirstBytes(Buffer.from([0x00, 0x01])).kind, "not-tls");
  assert.equal(classifyFirstBytes(Buffer.from([0x16, 0x02])).kind, "not-tls");
  assert.equal(classifyFirstBytes(Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff])).kind, "not-tls", "record too long");
  assert.equal(
    classifyFirstBytes(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x04, 0x02])).kind,
    "not-tls",
    "not a ClientHello",
  );
  assert.equal(looksLikeTls(Buffer.from("CONNECT")), false);
});

describe("clientHelloTicket", () => {
  test("the ticket a resuming ClientHello offers; none in a full one or in bytes that are not a ClientHello", async () => {
    const pki = await createTestPki();
    try {
      const { session, ticket } = await tlsSession(pki);
      assert.ok(ticket);
      const resuming = await captureClientHello("localhost", session);
      assert.deepEqual(clientHelloTicket(resuming), ticket);
      assert.equal(clientHelloTicket(await captureClientHello()), undefined);
      for (let n = 0; n < resuming.length; n += 7) clientHelloTicket(resuming.subarray(0, n));
      assert.equal(clientHelloTicket(Buffer.from("GET / HTTP/1.1\r\n\r\n")), undefined);
    } finally {
      pki.cleanup();
    }
  });
});

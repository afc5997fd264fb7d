import { test } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { dialEndpoint, goDialErrorText, resolveEndpointAddress, type DialFailure } from "./endpoint-dialer.js";

const sysErr = (code: string, extra: Record<string, unknown> = {}): Error =>
  Object.assign(new Error(`${code} happened`), { code, syscall: "connect", ...extra });

test("the cluster name maps to the apiserver address, exactly and case-sensitively", () => {
  const withPort = { clusterName: "east", apiserverAddress: "kubernetes.default.svc:443" };
  assert.equal(resolveEndpointAddress("east:443", withPort), "kubernetes.default.svc:443");
  assert.equal(resolveEndpointAddress("east:8443", withPort), "kubernetes.default.svc:443");
  assert.equal(resolveEndpointAddress("EAST:443", withPort), "EAST:443");
  assert.equal(resolveEndpointAddress("east.ns:443", withPort), "east.ns:443");
  assert.equal(resolveEndpointAddress("10.0.0.7:5432", withPort), "10.0.0.7:5432");

  const noPort = { clusterName: "1east", apiserverAddress: "10.96.0.1" };
  assert.equal(resolveEndpointAddress("1east:6443", noPort), "10.96.0.1:6443");
  const v6 = { clusterName: "c", apiserverAddress: "[fd00::1]" };
  assert.equal(resolveEndpointAddress("c:443", v6), "[fd00::1]:443");

  const none = { clusterName: "", apiserverAddress: "kubernetes.default.svc:443" };
  assert.equal(resolveEndpointAddress("east:443", none), "east:443");
});

test("socket errors are worded as Go's net.Dial words them", () => {
  assert.equal(
    goDialErrorText("tcp", "127.0.0.1:1", sysErr("ECONNREFUSED", { address: "127.0.0.1", port: 1 })),
    "dial tcp 127.0.0.1:1: connect: connection refused",
  );
  assert.equal(
    goDialErrorText(
      "tcp",
      "nosuch.example:80",
      sysErr("ENOTFOUND", { syscall: "getaddrinfo", hostname: "nosuch.example" }),
    ),
    "dial tcp: lookup nosuch.example: no such host",
  );
  assert.equal(
    goDialErrorText("tcp", "[fd00::1]:80", sysErr("EHOSTUNREACH", { address: "fd00::1", port: 80 })),
    "dial tcp [fd00::1]:80: connect: no route to host",
  );
  const aggregate = Object.assign(new AggregateError([sysErr("ECONNREFUSED", { address: "::1", port: 9 })], "x"), {});
  assert.equal(goDialErrorText("tcp", "localhost:9", aggregate), "dial tcp [::1]:9: connect: connection refused");
});

function dialOnce(
  protocol: string,
  target: string,
  connect?: () => net.Socket,
  clock?: ManualClock,
): Promise<DialFailure | undefined> {
  return new Promise((resolve) => {
    dialEndpoint(
      protocol,
      target,
      100,
      (failure, socket) => {
        socket?.destroy();
        resolve(failure);
      },
      connect,
      clock,
    );
  });
}

test("bad addresses and protocols fail like Go", async () => {
  assert.deepEqual(await dialOnce("tcp", "east"), {
    message: "dial tcp: address east: missing port in address",
    reason: "unknown",
  });
  assert.deepEqual(await dialOnce("udp", "east:53"), { message: "dial udp: unknown network udp", reason: "unknown" });
});

test("a dial that does not connect in time (of the injected clock) is an i/o timeout", async () => {
  const socket = new net.Socket();
  const clock = new ManualClock();
  const failure = dialOnce("tcp", "10.9.9.9:443", () => socket, clock);
  clock.advance(99);
  assert.equal(socket.destroyed, false, "not before the timeout");
  clock.advance(1);
  assert.deepEqual(await failure, {
    message: "dial tcp 10.9.9.9:443: i/o timeout",
    reason: "timeout",
  });
  assert.ok(socket.destroyed);
});

test("a refused dial reports connection refused; cancel stops a pending dial", async () => {
  const failure = await dialOnce("tcp", "127.0.0.1:1");
  assert.equal(failure?.message, "dial tcp 127.0.0.1:1: connect: connection refused");

  const socket = new net.Socket();
  const clock = new ManualClock();
  let called = false;
  const cancel = dialEndpoint(
    "tcp",
    "10.9.9.9:443",
    50,
    () => (called = true),
    () => socket,
    clock,
  );
  cancel();
  assert.ok(socket.destroyed);
  assert.equal(clock.armed, 0, "the dial timeout is cancelled");
  clock.advance(80); // past the dial timeout: done must not fire
  assert.equal(called, false);
});

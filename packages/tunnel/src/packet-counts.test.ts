import assert from "node:assert/strict";
import { test } from "node:test";
import { PacketType, packetTypeName } from "@cluster-proxy/protocol";
import { PacketCounts, type PacketLabels } from "./packet-counts.js";

type Segment = "from_agent" | "to_agent";

function reported(counts: PacketCounts<Segment>): [PacketLabels<Segment>, number][] {
  const out: [PacketLabels<Segment>, number][] = [];
  counts.report((labels, delta) => out.push([labels, delta]));
  return out;
}

test("packets are reported once per slot, by segment and type name, with what was added since the last report", () => {
  const counts = new PacketCounts<Segment>(["from_agent", "to_agent"]);
  assert.deepEqual(reported(counts), [], "nothing counted, nothing reported");
  counts.add("from_agent", PacketType.DATA);
  counts.add("from_agent", PacketType.DATA, 2);
  counts.add("to_agent", PacketType.DATA);
  counts.add("to_agent", PacketType.DIAL_REQ);
  const data = packetTypeName(PacketType.DATA);
  assert.deepEqual(
    reported(counts).sort((a, b) => a[0].segment.localeCompare(b[0].segment) || a[1] - b[1]),
    [
      [{ segment: "from_agent", packet_type: data }, 3],
      [{ segment: "to_agent", packet_type: data }, 1],
      [{ segment: "to_agent", packet_type: packetTypeName(PacketType.DIAL_REQ) }, 1],
    ],
  );
  assert.deepEqual(reported(counts), [], "a second scrape without new packets reports nothing");
  counts.add("to_agent", PacketType.DATA, 5);
  assert.deepEqual(reported(counts), [[{ segment: "to_agent", packet_type: data }, 5]]);
});

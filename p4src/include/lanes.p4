// Value-lane operations: one statement per lane, expanded over all ESA_K
// lanes.  Every slot_v<i> register holds lane i of each slot; `t` is a
// local bit<32> of the action using the macro.  Lanes are stored as bit<32>
// and read as int<32> inside the sum, which saturates (|+|): BMv2 reads a
// register unsigned, so the cast must sit in the expression.
#ifndef ESA_LANES_P4
#define ESA_LANES_P4

// slot := packet
#define LANE_CLAIM(i) slot_v##i.write(meta.idx, hdr.vals.v##i);
// slot := slot + packet
#define LANE_ADD(i) slot_v##i.read(t, meta.idx); \
    slot_v##i.write(meta.idx, (bit<32>)((int<32>)t |+| (int<32>)hdr.vals.v##i));
// packet := slot + packet (the slot is being released)
#define LANE_SUM_OUT(i) slot_v##i.read(t, meta.idx); \
    hdr.vals.v##i = (bit<32>)((int<32>)t |+| (int<32>)hdr.vals.v##i);
// slot := packet, packet := old slot (preemption, stale reclaim)
#define LANE_SWAP(i) slot_v##i.read(t, meta.idx); slot_v##i.write(meta.idx, hdr.vals.v##i); hdr.vals.v##i = t;
// packet := slot
#define LANE_LOAD(i) slot_v##i.read(hdr.vals.v##i, meta.idx);

#endif

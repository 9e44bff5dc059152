// Value-lane operations: one statement per lane, expanded over all ESA_K
// lanes.  Every slot_v<i> register holds lane i of each slot; the macros
// use the SlotPool's `slot.idx` and `vals`, and `t`, a local value_t of the
// action using them.  Lanes are stored as bit<32> and read as int<32> inside
// the sum, which saturates (|+|): BMv2 reads a register unsigned, so the cast
// must sit in the expression.
#ifndef ESA_LANES_P4
#define ESA_LANES_P4

// slot := packet
#define LANE_CLAIM(i) slot_v##i.write(slot.idx, vals.v##i);
// slot := slot + packet
#define LANE_ADD(i) slot_v##i.read(t, slot.idx); \
    slot_v##i.write(slot.idx, (value_t)((int<32>)t |+| (int<32>)vals.v##i));
// packet := slot + packet (the slot is being released)
#define LANE_SUM_OUT(i) slot_v##i.read(t, slot.idx); \
    vals.v##i = (value_t)((int<32>)t |+| (int<32>)vals.v##i);
// slot := packet, packet := old slot (preemption, reclaim)
#define LANE_SWAP(i) slot_v##i.read(t, slot.idx); slot_v##i.write(slot.idx, vals.v##i); vals.v##i = t;
// packet := slot
#define LANE_LOAD(i) slot_v##i.read(vals.v##i, slot.idx);

#endif

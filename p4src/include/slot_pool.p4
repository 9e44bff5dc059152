// The slot pool: registers, and rules S1-S12 of docs/dataplane.md for
// contributions and PS results.  Each rule ends in one verdict, the events it
// counts and where the packet goes.
#ifndef ESA_SLOT_POOL_P4
#define ESA_SLOT_POOL_P4

control SlotPool(inout headers_t hdr, inout metadata_t meta,
                 in standard_metadata_t std) {
    ESA_SLOT_REGISTERS

    action lanes_claim() { ESA_FOR_EACH_LANE(LANE_CLAIM) }
    action lanes_add() { bit<32> t; ESA_FOR_EACH_LANE(LANE_ADD) }
    action lanes_sum_out() { bit<32> t; ESA_FOR_EACH_LANE(LANE_SUM_OUT) }
    action lanes_swap() { bit<32> t; ESA_FOR_EACH_LANE(LANE_SWAP) }
    action lanes_load() { ESA_FOR_EACH_LANE(LANE_LOAD) }

    // The arriving contribution becomes the slot's owner.
    action take_slot() {
        slot_owner.write(meta.idx, hdr.esa.job ++ hdr.esa.seq);
        slot_bitmap.write(meta.idx, hdr.esa.bitmap);
        slot_count.write(meta.idx, 1);
        slot_prio.write(meta.idx, meta.prio);
        slot_ts.write(meta.idx, std.ingress_global_timestamp);
        slot_state.write(meta.idx, hdr.esa.flags & FLAG_OVERFLOW);
    }

    // The running sum stays in the slot.
    action keep_slot() {
        slot_bitmap.write(meta.idx, meta.bitmap);
        slot_count.write(meta.idx, meta.count);
        slot_ts.write(meta.idx, std.ingress_global_timestamp);
        slot_state.write(meta.idx, meta.state);
    }

    action release() {
        slot_owner.write(meta.idx, 0);
    }

    // The packet's header becomes that of the sum that leaves the slot
    // (owner, bitmap, count and state as read into meta).
    action sum_header(bit<8> ptype) {
        hdr.esa.ptype = ptype;
        hdr.esa.job = meta.owner[47:32];
        hdr.esa.seq = meta.owner[31:0];
        hdr.esa.bitmap = meta.bitmap;
        hdr.esa.count = meta.count;
        hdr.esa.flags = meta.state & FLAG_OVERFLOW;
        meta.sum_out = 1;
    }

    action fallback() {
        hdr.esa.ptype = PTYPE_FALLBACK;
        meta.verdict = VERDICT_FALLBACK;
        meta.ev1 = EV_FALLBACK;
        meta.dest = DEST_PS;
    }

    action read_sum_state() {
        slot_bitmap.read(meta.bitmap, meta.idx);
        slot_count.read(meta.count, meta.idx);
        slot_state.read(meta.state, meta.idx);
    }

    apply {
        bool retx = (hdr.esa.flags & FLAG_RETX) != 0;
        bit<48> key = hdr.esa.job ++ hdr.esa.seq;
        if (meta.no_slot == 1) {
            if (hdr.esa.ptype == PTYPE_CONTRIB) {
                fallback();  // S1: STATIC job without a partition.
            } else {
                meta.verdict = VERDICT_PS_PASS;  // S12 without a slot to release.
                meta.ev1 = EV_PS_RESULT;
                meta.dest = DEST_WORKERS;
            }
        } else if (hdr.esa.ptype == PTYPE_PS_RESULT) {
            // S12: a PS result goes to the workers; it releases the chunk's slot.
            slot_owner.read(meta.owner, meta.idx);
            meta.ev1 = EV_PS_RESULT;
            meta.dest = DEST_WORKERS;
            meta.verdict = VERDICT_PS_PASS;
            if (meta.owner == key) {
                release();
                meta.verdict = VERDICT_PS_RELEASE;
                meta.ev2 = EV_RELEASED_BY_PS;
            }
        } else {
            slot_owner.read(meta.owner, meta.idx);
            if (meta.owner == key) {
                read_sum_state();
                if ((meta.state & STATE_DONE) != 0) {
                    fallback();  // S2: ATP holds the complete sum; the PS answers.
                } else if ((meta.bitmap & hdr.esa.bitmap) != 0) {
                    meta.ev1 = EV_DUPLICATE;
                    if (retx) {
                        // S3: retransmitted duplicate: flush the partial to the PS.
                        lanes_load();
                        release();
                        sum_header(PTYPE_PARTIAL);
                        meta.verdict = VERDICT_FLUSH;
                        meta.ev2 = EV_FLUSHED;
                        meta.dest = DEST_PS;
                    } else {
                        meta.verdict = VERDICT_DUPLICATE;  // S4
                    }
                } else {
                    meta.bitmap = meta.bitmap | hdr.esa.bitmap;
                    meta.count = meta.count + 1;
                    meta.state = meta.state | (hdr.esa.flags & FLAG_OVERFLOW);
                    if (meta.count == meta.fan_in) {
                        // S5: the sum is complete.
                        lanes_sum_out();
                        sum_header(PTYPE_RESULT);
                        meta.verdict = VERDICT_COMPLETE;
                        meta.ev1 = EV_AGGREGATED;
                        meta.ev2 = EV_COMPLETED;
                        if (meta.policy == POLICY_ATP) {
                            // ATP: hold the slot until the PS's result returns.
                            meta.state = meta.state | STATE_DONE;
                            keep_slot();
                            hdr.esa.flags = hdr.esa.flags | FLAG_HOLD;
                            meta.dest = DEST_PS;
                        } else {
                            // ESA, STATIC: free the slot now; result to all.
                            release();
                            meta.dest = DEST_ALL;
                        }
                    } else if (retx) {
                        // S6: a retransmission flushes the partial (with it) to the PS.
                        lanes_sum_out();
                        release();
                        sum_header(PTYPE_PARTIAL);
                        meta.verdict = VERDICT_FLUSH;
                        meta.ev1 = EV_FLUSHED;
                        meta.dest = DEST_PS;
                    } else {
                        // S7: add and wait for the rest.
                        lanes_add();
                        keep_slot();
                        meta.verdict = VERDICT_ADD;
                        meta.ev1 = EV_AGGREGATED;
                    }
                }
            } else {
                bit<48> ts;
                bit<8> prio;
                slot_ts.read(ts, meta.idx);
                bool stale = meta.owner != 0 &&
                             std.ingress_global_timestamp - ts > meta.stale_us;
                bool take = false;
                if (meta.owner == 0 || stale) {
                    if (retx) {
                        fallback();  // S8: a retransmission never starts a slot.
                    } else if (meta.owner == 0) {
                        // S9: claim a free slot.
                        lanes_claim();
                        take_slot();
                        meta.verdict = VERDICT_CLAIM;
                        meta.ev1 = EV_AGGREGATED;
                    } else {
                        // S10: reclaim a stale slot.
                        take = true;
                        meta.verdict = VERDICT_RECLAIM;
                        meta.victim_ev = EV_STALE_RECLAIMED;
                    }
                } else {
                    slot_prio.read(prio, meta.idx);
                    if (meta.policy == POLICY_ESA && !retx && meta.prio > prio) {
                        // S11: preempt a lower-priority holder.
                        take = true;
                        meta.verdict = VERDICT_PREEMPT;
                        meta.ev2 = EV_PREEMPT_WON;
                        meta.victim_ev = EV_PREEMPT_SUFFERED;
                    } else {
                        fallback();  // S8: held by an equal or higher priority.
                    }
                }
                if (take) {
                    // S10, S11: the holder's partial leaves in this packet,
                    // unless its sum was already complete (ATP hold).
                    meta.victim_job = meta.owner[47:32];
                    meta.ev1 = EV_AGGREGATED;
                    read_sum_state();
                    if ((meta.state & STATE_DONE) != 0) {
                        lanes_claim();
                        take_slot();
                    } else {
                        lanes_swap();
                        take_slot();
                        sum_header(PTYPE_PARTIAL);
                        meta.dest = DEST_PS;
                    }
                }
            }
        }
        if (meta.sum_out == 1 && ESA_ANY_SATURATED(hdr.vals)) {
            // A lane at an int32 limit may have saturated: flag the sum.
            hdr.esa.flags = hdr.esa.flags | FLAG_OVERFLOW;
        }
    }
}

#endif

// The slot pool: its registers, and rules S0-S13, L1-L6 (rule L: a busy home
// borrows a slot outside it, hashed over the rest of the pool), T2 and T3 of docs/dataplane.md for
// contributions, PS results and packets passing through.  Under ESA a chunk
// has a second slot h' (half its home away, or a second hash without a
// home): every packet looks for its chunk at h, h' and g, and reads their
// markers, before anything is claimed; h', g and their registers are read
// at their indices in the one pass, as h is.  A contribution goes through
// three steps: read what the rules
// need of its slot, decide the rule (OwnChunkRules, OtherChunkRules: no
// register access), then carry the rule out as one SlotOp of register and
// header actions.
#ifndef ESA_SLOT_POOL_P4
#define ESA_SLOT_POOL_P4

// The flags of a contribution that its slot's state keeps: the same bits as
// STATE_OVERFLOW and STATE_RESENT, so a sum that leaves says whether a
// contribution of it was flagged OVERFLOW or was a retransmission (RETX).
const flags_t JOINED_FLAGS = FLAG_OVERFLOW | FLAG_RETX;

// The marker `gone` (a slot_gone or slot_evicted entry) covers chunk `c`:
// the same job, and c's seq at most GONE_SPAN - 1 behind the marker's, modulo
// 2^32 (S13).
bool covers(in chunk_key_t gone, in chunk_key_t c) {
    return gone[47:32] == c[47:32] && gone[31:0] - c[31:0] < GONE_SPAN;
}

// What a rule does to the slot and the packet.  "Mark" is the marking of
// docs/dataplane.md: slot_gone := the chunk, unless it covers the chunk; a
// holder whose slot a chunk of another job takes (TAKE) is marked the same
// way in slot_evicted, which that job's own markings never replace.
enum SlotOp {
    NONE,              // nothing (S4; S12 sets its outcome directly)
    PASS_SUM,          // S0: the contribution alone is the complete sum
    FALLBACK,          // the contribution goes to its PS unchanged (S1, S13)
    DIVERT,            // S2, S8: so does the rest of its chunk (mark the chunk)
    PASS_GONE,         // T2: a packet passing through to its PS; mark its chunk
    CLAIM,             // S9: the contribution starts the slot
    ADD,               // S7: add into the slot, keep waiting
    COMPLETE_RELEASE,  // S5 (ESA, STATIC): the sum goes out, the slot is free
    COMPLETE_HOLD,     // S5 (ATP): the sum goes to the PS or up, the slot is held
    FLUSH_HELD,        // S3: the slot's partial (without the packet) to the PS
    FLUSH_WITH,        // S6, T2: the slot's partial plus the packet to the PS
    TAKE               // S10, S11: the packet takes the slot; the holder's partial leaves
}

// S2-S7: the slot holds the contribution's own chunk; `slot` holds its
// bitmap, count and state as read.
control OwnChunkRules(in esa_h esa, in job_meta_t job, inout slot_meta_t slot,
                      inout outcome_t outcome, out SlotOp op) {
    apply {
        bool retx = (esa.flags & FLAG_RETX) != 0;
        op = SlotOp.NONE;
        if ((slot.state & STATE_DONE) != 0) {
            op = SlotOp.DIVERT;  // S2: ATP holds the complete sum; the PS answers.
        } else if ((slot.bitmap & esa.bitmap) != 0) {
            outcome.ev1 = event_t.DUPLICATE;
            if (retx) {
                // S3: retransmitted duplicate: flush the partial to the PS.
                op = SlotOp.FLUSH_HELD;
                outcome.verdict = verdict_t.FLUSH;
                outcome.ev2 = event_t.FLUSHED;
                outcome.dest = dest_t.PS;
            } else {
                outcome.verdict = verdict_t.DUPLICATE;  // S4
            }
        } else {
            slot.bitmap = slot.bitmap | esa.bitmap;
            slot.count = slot.count + 1;
            slot.state = slot.state | (esa.flags & JOINED_FLAGS);
            if (slot.count == job.fan_in) {
                // S5: the sum is complete.  ATP holds the slot until the PS's
                // result returns; ESA and STATIC free it now.  Below the top
                // the sum goes up as one contribution; at the top the result
                // goes to all (ATP: to the PS).
                outcome.verdict = verdict_t.COMPLETE;
                outcome.ev1 = event_t.AGGREGATED;
                outcome.ev2 = event_t.COMPLETED;
                if (job.policy == policy_t.ATP) {
                    op = SlotOp.COMPLETE_HOLD;
                    outcome.dest = dest_t.PS;
                } else {
                    op = SlotOp.COMPLETE_RELEASE;
                    outcome.dest = dest_t.ALL;
                }
                if (job.up_port != 0) {
                    outcome.dest = dest_t.UP;
                }
            } else if (retx && job.policy == policy_t.ATP) {
                // S6: under ATP a retransmission flushes the partial (with
                // it) to the PS; under ESA and STATIC it adds itself (S7).
                op = SlotOp.FLUSH_WITH;
                outcome.verdict = verdict_t.FLUSH;
                outcome.ev1 = event_t.FLUSHED;
                outcome.dest = dest_t.PS;
            } else {
                op = SlotOp.ADD;  // S7: add and wait for the rest.
                outcome.verdict = verdict_t.ADD;
                outcome.ev1 = event_t.AGGREGATED;
            }
        }
    }
}

// S8-S11, L4-L5: the slot is free or held by another chunk; when held,
// `slot.state`, the holder's priority and the slot's age were read.  `evict`:
// the slot is the job's home under rule L, whose owner evicts a guest of no
// higher priority (L4) instead of preempting by priority (S11); `preempt`:
// S11 applies (not at a home under rule L, nor at a borrowed slot, L5).
control OtherChunkRules(in esa_h esa, in job_meta_t job, in slot_meta_t slot, in usec_t age,
                        in prio_t holder_prio, in bool evict, in bool preempt,
                        inout outcome_t outcome, out SlotOp op) {
    apply {
        bool retx = (esa.flags & FLAG_RETX) != 0;
        bool held = slot.owner != 0;
        bool stale = held && age > job.stale_us;
        // An incomplete partial untouched for the squat timeout.
        bool idle = held && job.squat_us != 0 && (slot.state & STATE_DONE) == 0 &&
                    age > job.squat_us;
        op = SlotOp.DIVERT;  // S8: a retransmission never starts a slot, and
                             // a holder of equal or higher priority stays.
        if (!held && !retx) {
            op = SlotOp.CLAIM;  // S9: claim a free slot.
            outcome.verdict = verdict_t.CLAIM;
            outcome.ev1 = event_t.AGGREGATED;
        } else if ((stale || idle) && !retx) {
            op = SlotOp.TAKE;  // S10: reclaim a stale or idle slot.
            outcome.verdict = verdict_t.RECLAIM;
            outcome.victim_ev = stale ? event_t.STALE_RECLAIMED : event_t.IDLE_RECLAIMED;
        } else if (held && !stale && !idle && !retx && evict &&
                   slot.owner[47:32] != esa.job && holder_prio <= job.priority) {
            op = SlotOp.TAKE;  // L4: the home's owner evicts its guest.
            outcome.verdict = verdict_t.PREEMPT;
            outcome.ev2 = event_t.PREEMPT_WON;
            outcome.victim_ev = event_t.GUEST_EVICTED;
        } else if (held && !stale && !idle && !retx && preempt && job.policy == policy_t.ESA &&
                   job.priority > holder_prio) {
            op = SlotOp.TAKE;  // S11: preempt a lower-priority holder.
            outcome.verdict = verdict_t.PREEMPT;
            outcome.ev2 = event_t.PREEMPT_WON;
            outcome.victim_ev = event_t.PREEMPT_SUFFERED;
        }
        if (op == SlotOp.TAKE) {
            outcome.victim_job = slot.owner[47:32];
            outcome.ev1 = event_t.AGGREGATED;
        }
    }
}

control SlotPool(inout esa_h esa, inout esa_values_h vals, in job_meta_t job,
                 inout slot_meta_t slot, inout outcome_t outcome, in usec_t now) {
    ESA_SLOT_REGISTERS
    OwnChunkRules() own_chunk;
    OtherChunkRules() other_chunk;
    OtherChunkRules() second_chunk;
    OtherChunkRules() guest_chunk;

    action lanes_claim() { ESA_FOR_EACH_LANE(LANE_CLAIM) }
    action lanes_add() { value_t t; ESA_FOR_EACH_LANE(LANE_ADD) }
    action lanes_sum_out() { value_t t; ESA_FOR_EACH_LANE(LANE_SUM_OUT) }
    action lanes_swap() { value_t t; ESA_FOR_EACH_LANE(LANE_SWAP) }
    action lanes_load() { ESA_FOR_EACH_LANE(LANE_LOAD) }

    // The arriving contribution becomes the slot's owner.
    action take_slot() {
        slot_owner.write(slot.idx, esa.job ++ esa.seq);
        slot_bitmap.write(slot.idx, esa.bitmap);
        slot_count.write(slot.idx, 1);
        slot_prio.write(slot.idx, job.priority);
        slot_ts.write(slot.idx, now);
        slot_state.write(slot.idx, esa.flags & JOINED_FLAGS);
    }

    // The running sum stays in the slot.
    action keep_slot() {
        slot_bitmap.write(slot.idx, slot.bitmap);
        slot_count.write(slot.idx, slot.count);
        slot_ts.write(slot.idx, now);
        slot_state.write(slot.idx, slot.state);
    }

    action release() {
        slot_owner.write(slot.idx, 0);
    }

    action read_sum_state() {
        slot_bitmap.read(slot.bitmap, slot.idx);
        slot_count.read(slot.count, slot.idx);
        slot_state.read(slot.state, slot.idx);
    }

    // The number of bits of `b`: a sum carries as many contributions as
    // workers (what the PS checks), while a slot counts its direct
    // contributors (a child's sum is one) toward the fan-in.
    action workers_in(in bitmap_t b, out count_t n) {
        bitmap_t c = b - ((b >> 1) & 0x55555555);
        c = (c & 0x33333333) + ((c >> 2) & 0x33333333);
        c = (c + (c >> 4)) & 0x0F0F0F0F;
        n = (count_t)((c * 0x01010101) >> 24);
    }

    // The packet's header becomes that of the sum that leaves the slot
    // (owner, bitmap, count and state as read into `slot`).
    action sum_header(ptype_t ptype) {
        esa.ptype = ptype;
        esa.job = slot.owner[47:32];
        esa.seq = slot.owner[31:0];
        esa.bitmap = slot.bitmap;
        workers_in(slot.bitmap, esa.count);
        esa.flags = slot.state & FLAG_OVERFLOW;
        if (ptype != PTYPE_CONTRIB) {
            // a sum that leaves as a contribution (up) would read as resent
            esa.flags = esa.flags | (slot.state & STATE_RESENT);
        }
        outcome.sum_out = true;
    }

    action fallback() {
        esa.ptype = PTYPE_FALLBACK;
        outcome.verdict = verdict_t.FALLBACK;
        outcome.ev1 = event_t.FALLBACK;
        outcome.dest = dest_t.PS;
    }

    apply {
        chunk_key_t key = esa.job ++ esa.seq;
        SlotOp op = SlotOp.NONE;
        // The slot's markers, once read, and the chunk to mark, if any.
        chunk_key_t gone = 0;
        chunk_key_t evicted = 0;
        bool gone_read = false;
        chunk_key_t mark = 0;
        bool victim = false;  // mark in slot_evicted
        // S5: a complete sum goes to the device above as one contribution,
        // or, where the job completes, as the result.
        ptype_t complete = PTYPE_RESULT;
        if (job.up_port != 0) {
            complete = PTYPE_CONTRIB;
        }
        if (slot.no_slot) {
            if (slot.transit) {
                outcome.verdict = verdict_t.TRANSIT;  // T2 without a slot.
                outcome.dest = dest_t.PS;
            } else if (esa.ptype == PTYPE_CONTRIB) {
                op = SlotOp.FALLBACK;  // S1: STATIC job without a partition.
            } else {
                outcome.verdict = verdict_t.PS_PASS;  // S12 without a slot to release.
                outcome.ev1 = event_t.PS_RESULT;
                outcome.dest = dest_t.WORKERS;
            }
        } else if (esa.ptype == PTYPE_CONTRIB && job.fan_in == 1 &&
                   (esa.flags & FLAG_RETX) == 0) {
            // S0: the only contribution this device sums (a ToR with one
            // worker of the job, a switch with one child) is the complete
            // sum: it goes on as S5 says, and no slot is touched.
            op = SlotOp.PASS_SUM;
            outcome.verdict = verdict_t.COMPLETE;
            outcome.ev1 = event_t.AGGREGATED;
            outcome.ev2 = event_t.COMPLETED;
            outcome.dest = dest_t.ALL;
            if (job.up_port != 0) {
                outcome.dest = dest_t.UP;
            } else if (job.policy == policy_t.ATP) {
                outcome.dest = dest_t.PS;
            }
        } else {
            // The chunk's slot: h (slot.idx), else its second slot h', else
            // under rule L its borrowed slot g, whichever holds the chunk
            // (L1, L2; T2 and S12 look there too); h when none does.
            slot_idx_t home_idx = slot.idx;
            slot_owner.read(slot.owner, slot.idx);
            chunk_key_t second_owner = 0;
            chunk_key_t guest_owner = 0;
            if (slot.has_second) {
                slot_owner.read(second_owner, slot.second_idx);
            }
            if (slot.borrows) {
                slot_owner.read(guest_owner, slot.guest_idx);
            }
            if (slot.owner != key && slot.has_second && second_owner == key) {
                slot.idx = slot.second_idx;
                slot.owner = key;
            } else if (slot.owner != key && slot.borrows && guest_owner == key) {
                slot.idx = slot.guest_idx;
                slot.owner = key;
            }
            if (slot.transit) {
                // T2: a fallback or partial of another switch passes through
                // on its way to the PS, so its chunk can not complete here: a
                // slot holding it flushes it along (as a retransmission
                // would, S6), and the chunk's later contributions follow it
                // (S13).  T3: a complete (ATP) or overlapping slot lets it
                // pass untouched.
                outcome.verdict = verdict_t.TRANSIT;
                outcome.dest = dest_t.PS;
                if (slot.owner != key) {
                    op = SlotOp.PASS_GONE;
                } else {
                    read_sum_state();
                    if ((slot.state & STATE_DONE) == 0 && (slot.bitmap & esa.bitmap) == 0) {
                        slot.bitmap = slot.bitmap | esa.bitmap;
                        slot.count = slot.count + 1;
                        slot.state = slot.state | (esa.flags & JOINED_FLAGS);
                        op = SlotOp.FLUSH_WITH;
                        outcome.verdict = verdict_t.FLUSH;
                        outcome.ev1 = event_t.FLUSHED;
                    }
                }
            } else if (esa.ptype == PTYPE_PS_RESULT) {
                // S12: a PS result goes to the workers; it releases the chunk's slot.
                outcome.ev1 = event_t.PS_RESULT;
                outcome.dest = dest_t.WORKERS;
                outcome.verdict = verdict_t.PS_PASS;
                if (slot.owner == key) {
                    release();
                    outcome.verdict = verdict_t.PS_RELEASE;
                    outcome.ev2 = event_t.RELEASED_BY_PS;
                }
            } else if (slot.owner == key) {
                read_sum_state();
                own_chunk.apply(esa, job, slot, outcome, op);
            } else {
                // S13, L3: a marker (slot_gone or slot_evicted) at h, h'
                // (or, under rule L, at g) covering the chunk sends it after
                // its piece at the PS.
                chunk_key_t second_gone = 0;
                chunk_key_t guest_gone = 0;
                chunk_key_t second_evicted = 0;
                chunk_key_t guest_evicted = 0;
                slot_gone.read(gone, home_idx);
                slot_evicted.read(evicted, home_idx);
                gone_read = true;
                if (slot.has_second) {
                    slot_gone.read(second_gone, slot.second_idx);
                    slot_evicted.read(second_evicted, slot.second_idx);
                }
                if (slot.borrows) {
                    slot_gone.read(guest_gone, slot.guest_idx);
                    slot_evicted.read(guest_evicted, slot.guest_idx);
                }
                if (covers(gone, key) || covers(evicted, key) || covers(second_gone, key) ||
                    covers(second_evicted, key) || covers(guest_gone, key) ||
                    covers(guest_evicted, key)) {
                    op = SlotOp.FALLBACK;  // S13: follow the chunk's partial to the PS.
                    outcome.ev2 = event_t.FOLLOWED;
                } else {
                    // The rules at h and at h', each on its own copy of the
                    // outcome: h free, stale or idle first, then h', then a
                    // preemption (L4: an eviction) at h, then at h'.
                    usec_t ts = 0;
                    prio_t holder_prio = 0;
                    if (slot.owner != 0) {
                        slot_ts.read(ts, home_idx);
                        slot_state.read(slot.state, home_idx);
                        slot_prio.read(holder_prio, home_idx);
                    }
                    outcome_t home_out = outcome;
                    SlotOp home_op;
                    other_chunk.apply(esa, job, slot, now - ts, holder_prio, slot.lends,
                                      !slot.lends, home_out, home_op);
                    slot_meta_t second = slot;
                    second.idx = slot.second_idx;
                    second.owner = second_owner;
                    second.state = 0;
                    outcome_t second_out = outcome;
                    SlotOp second_op = SlotOp.DIVERT;
                    if (slot.has_second) {
                        usec_t second_ts = 0;
                        prio_t second_prio = 0;
                        if (second_owner != 0) {
                            slot_ts.read(second_ts, second.idx);
                            slot_state.read(second.state, second.idx);
                            slot_prio.read(second_prio, second.idx);
                        }
                        second_chunk.apply(esa, job, second, now - second_ts, second_prio,
                                           slot.lends, !slot.lends, second_out, second_op);
                    }
                    bool home_vacant = home_op != SlotOp.DIVERT &&
                                       home_out.verdict != verdict_t.PREEMPT;
                    bool second_vacant = second_op != SlotOp.DIVERT &&
                                         second_out.verdict != verdict_t.PREEMPT;
                    op = SlotOp.DIVERT;  // S8, L6: at h, the outcome as it came
                    if (home_vacant || (!second_vacant && home_op != SlotOp.DIVERT)) {
                        op = home_op;
                        outcome = home_out;
                    } else if (second_op != SlotOp.DIVERT) {
                        op = second_op;
                        outcome = second_out;
                        slot.idx = second.idx;
                        slot.owner = second.owner;
                        slot.state = second.state;
                        gone = second_gone;
                        evicted = second_evicted;
                    }
                    bool retx = (esa.flags & FLAG_RETX) != 0;
                    if (slot.borrows && op == SlotOp.DIVERT && !retx) {
                        // L5: h and h' are busy; a first send borrows g, outside
                        // the home, if g is free, stale or idle (a guest never
                        // preempts).  Otherwise L6: it falls back at h.
                        slot_meta_t guest = slot;
                        guest.idx = slot.guest_idx;
                        guest.owner = guest_owner;
                        usec_t guest_ts = 0;
                        prio_t guest_prio = 0;
                        if (guest_owner != 0) {
                            slot_ts.read(guest_ts, guest.idx);
                            slot_state.read(guest.state, guest.idx);
                            slot_prio.read(guest_prio, guest.idx);
                        }
                        guest_chunk.apply(esa, job, guest, now - guest_ts, guest_prio, false,
                                          false, outcome, op);
                        if (op != SlotOp.DIVERT) {
                            slot.idx = guest.idx;
                            slot.owner = guest.owner;
                            slot.state = guest.state;
                            gone = guest_gone;
                            evicted = guest_evicted;
                            outcome.ev2 = event_t.LENT;
                        }
                    }
                }
            }
        }

        if (op == SlotOp.PASS_SUM) {
            esa.ptype = complete;
            workers_in(esa.bitmap, esa.count);
            esa.flags = esa.flags & FLAG_OVERFLOW;
            outcome.sum_out = true;
            if (outcome.dest == dest_t.PS) {
                esa.flags = esa.flags | FLAG_HOLD;
            }
        } else if (op == SlotOp.FALLBACK) {
            fallback();
        } else if (op == SlotOp.DIVERT) {
            fallback();
            mark = key;
        } else if (op == SlotOp.PASS_GONE) {
            mark = key;
        } else if (op == SlotOp.CLAIM) {
            lanes_claim();
            take_slot();
        } else if (op == SlotOp.ADD) {
            lanes_add();
            keep_slot();
        } else if (op == SlotOp.COMPLETE_RELEASE) {
            lanes_sum_out();
            release();
            sum_header(complete);
        } else if (op == SlotOp.COMPLETE_HOLD) {
            lanes_sum_out();
            sum_header(complete);
            slot.state = slot.state | STATE_DONE;
            keep_slot();
            if (job.up_port == 0) {
                esa.flags = esa.flags | FLAG_HOLD;
            }
        } else if (op == SlotOp.FLUSH_HELD) {
            lanes_load();
            release();
            mark = key;
            sum_header(PTYPE_PARTIAL);
        } else if (op == SlotOp.FLUSH_WITH) {
            lanes_sum_out();
            release();
            mark = key;
            sum_header(PTYPE_PARTIAL);
        } else if (op == SlotOp.TAKE) {
            // The holder's partial leaves in this packet, unless its sum was
            // already complete (ATP hold).
            slot_bitmap.read(slot.bitmap, slot.idx);
            slot_count.read(slot.count, slot.idx);
            if ((slot.state & STATE_DONE) != 0) {
                lanes_claim();
                take_slot();
            } else {
                lanes_swap();
                mark = slot.owner;
                victim = slot.owner[47:32] != esa.job;
                take_slot();
                sum_header(PTYPE_PARTIAL);
                outcome.dest = dest_t.PS;
            }
        }
        if (mark != 0 && victim) {
            // The holder's chunk went to its PS for a chunk of another job
            // (TAKE, whose markers were read above): the victims' marker.
            if (!covers(evicted, mark)) {
                slot_evicted.write(slot.idx, mark);
            }
        } else if (mark != 0) {
            // The chunk went from this slot to its PS: the marker keeps its
            // job's highest such seq, so a marker that covers it stays.
            if (!gone_read) {
                slot_gone.read(gone, slot.idx);
            }
            if (!covers(gone, mark)) {
                slot_gone.write(slot.idx, mark);
            }
        }
        if (outcome.sum_out && ESA_ANY_SATURATED(vals)) {
            // A lane at an int32 limit may have saturated: flag the sum.
            esa.flags = esa.flags | FLAG_OVERFLOW;
        }
    }
}

#endif

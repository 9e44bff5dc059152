// Admission: policy, job table, children table, packet-type, link and worker
// checks, slot index.  Rules A1-A7, D1 and T1 of docs/dataplane.md.
// Priority comes from the job table, never from the packet.
#ifndef ESA_ADMISSION_P4
#define ESA_ADMISSION_P4

control Admission(in esa_h esa, in port_t ingress_port, inout job_meta_t job,
                  inout slot_meta_t slot, inout outcome_t outcome) {
    action set_policy(bit<8> policy, bit<48> stale_us, bit<48> squat_us) {
        job.policy = (policy_t)policy;
        job.stale_us = stale_us;
        job.squat_us = squat_us;
    }

    // No key: the controller rewrites the default action to switch policy.
    table policy {
        actions = { set_policy; }
        default_action = set_policy((bit<8>)policy_t.ESA, DEFAULT_STALE_US, DEFAULT_SQUAT_US);
        size = 1;
    }

    // set_job(row): the job table's row into job (jobrow.p4, from esa/jobrow.py).
    ESA_SET_JOB(job)

    action reject(drop_t reason) {
        outcome.dest = dest_t.DROP;
        outcome.drop_reason = reason;
    }

    action unknown_job() {
        reject(drop_t.UNKNOWN_JOB);
    }

    table jobs {
        key = { esa.job: exact @name("job"); }
        actions = { set_job; @defaultonly unknown_job; }
        default_action = unknown_job();
        size = JOB_TABLE_SIZE;
    }

    // The workers below a child switch: its sum arrives with exactly these bits.
    bitmap_t child_bitmap = 0;

    action set_child(bitmap_t bitmap) {
        child_bitmap = bitmap;
    }

    table children {
        key = {
            esa.job: exact @name("job");
            ingress_port: exact @name("port");
        }
        actions = { set_child; @defaultonly NoAction; }
        default_action = NoAction();
        size = CHILDREN_TABLE_SIZE;
    }

    action hash_index(out slot_idx_t idx) {
        hash(idx, HashAlgorithm.crc32, (slot_idx_t)0, { esa.job, esa.seq }, (bit<32>)POOL_SIZE);
    }

    // part_base + seq mod part_size: the hash extern takes a run-time
    // modulus where the % operator needs a constant.
    action partition_index() {
        hash(slot.idx, HashAlgorithm.identity, job.part_base, { esa.seq }, job.part_size);
    }

    // The chunk's second home slot h': half the home away, the sum taken
    // in 32 bits, modulo the home (home_second in esa/model.py).
    action second_home_index() {
        bit<32> half_away = esa.seq + (bit<32>)(job.part_size >> 1);
        hash(slot.second_idx, HashAlgorithm.identity, job.part_base, { half_away },
             job.part_size);
    }

    // The second slot of a chunk of a job without a home: the CRC's high
    // half modulo the pool (second_hash in esa/model.py).
    action second_hash_index() {
        bit<32> crc;
        hash(crc, HashAlgorithm.crc32, (bit<32>)0, { esa.job, esa.seq }, (bit<64>)0x100000000);
        bit<16> high = crc[31:16];
        hash(slot.second_idx, HashAlgorithm.identity, (slot_idx_t)0, { high },
             (bit<32>)POOL_SIZE);
    }

    // Rule L's slot g before it is counted past the home: the CRC modulo
    // the slots outside the home (borrowed_slot in esa/model.py).
    action outside_index() {
        hash(slot.guest_idx, HashAlgorithm.crc32, (slot_idx_t)0, { esa.job, esa.seq },
             (bit<32>)POOL_SIZE - (bit<32>)job.part_size);
    }

    // The port of the PS of the packet's chunk: its shard's.
    action shard_ps_port(out port_t port) {
        bit<8> shard = (bit<8>)(esa.seq[PS_SHARD_BITS - 1:0] & job.shard_mask);
        port = (port_t)(job.ps_ports >> (shard * PORT_BITS));
    }

    apply {
        job.id = esa.job;
        policy.apply();
        bool switch_only = esa.ptype == PTYPE_RESULT || esa.ptype == PTYPE_FALLBACK ||
                           esa.ptype == PTYPE_PARTIAL;
        if (esa.ptype != PTYPE_CONTRIB && esa.ptype != PTYPE_PS_RESULT &&
            esa.ptype != PTYPE_PULL && esa.ptype != PTYPE_FLOAT && !switch_only) {
            // A1: unknown types.
            reject(drop_t.BAD_TYPE);
        } else if (!jobs.apply().hit) {
            if (switch_only) {
                reject(drop_t.BAD_TYPE);  // A1: never from a host
            }
        } else {
            bool from_child = children.apply().hit;
            bool from_up = job.up_port != 0 && ingress_port == job.up_port;
            if (esa.ptype == PTYPE_FLOAT) {
                // A3: float resends go to the PS untouched.
                outcome.verdict = verdict_t.TO_PS;
                outcome.dest = dest_t.PS;
            } else if (esa.ptype == PTYPE_CONTRIB) {
                if (from_child) {
                    // A6: a child's sum carries exactly the bits below it.
                    if (esa.bitmap != child_bitmap) {
                        reject(drop_t.SPOOFED_WORKER);
                        outcome.ev1 = event_t.SPOOFED;
                    } else {
                        slot.to_pool = true;
                    }
                } else if (esa.bitmap == 0 || (esa.bitmap & (esa.bitmap - 1)) != 0 ||
                           (esa.bitmap & ~job.worker_mask) != 0) {
                    // A6: one bit, inside the job's worker set.
                    reject(drop_t.SPOOFED_WORKER);
                    outcome.ev1 = event_t.SPOOFED;
                } else {
                    slot.to_pool = true;
                }
            } else if (switch_only) {
                if (!from_child && !from_up) {
                    // A1: switch-only types only from another switch of the job.
                    reject(drop_t.BAD_TYPE);
                } else if (esa.ptype == PTYPE_RESULT && from_up && job.fan_in != 0 &&
                           (esa.flags & FLAG_HOLD) == 0) {
                    // D1: the sum completed above comes down to this device's group.
                    outcome.verdict = verdict_t.DOWN;
                    outcome.dest = dest_t.ALL;
                } else if (esa.ptype == PTYPE_RESULT || job.fan_in == 0) {
                    // T1: bound for the PS, passing through.
                    outcome.verdict = verdict_t.TRANSIT;
                    outcome.dest = dest_t.PS;
                } else {
                    // T2: a fallback or partial passing through meets its slot.
                    slot.transit = true;
                    slot.to_pool = true;
                }
            } else {
                port_t ps_port;
                shard_ps_port(ps_port);
                if (ingress_port != ps_port) {
                    // A4: PS_RESULT and PULL only from the PS of the chunk's shard.
                    reject(drop_t.BAD_TYPE);
                } else if (esa.ptype == PTYPE_PULL) {
                    // A5: a PULL goes on to the workers.
                    outcome.verdict = verdict_t.PS_PASS;
                    outcome.dest = dest_t.WORKERS;
                } else {
                    slot.to_pool = true;
                }
            }
        }
        // A2: an unknown job was rejected by the jobs table's default action.
        if (slot.to_pool) {
            // A7: the chunk's slot (CONTRIB, PS_RESULT, T2).  STATIC: in the
            // job's own partition; a job without one has no slot.  ESA: in
            // the job's partition when it has one (with a second slot h'
            // half the home away, and, rule L, a slot outside it, hashed
            // over the rest of the pool, which a busy home may borrow),
            // else a hash over the whole pool (and a second hash).  ATP:
            // always the hash.
            if (job.part_size != 0 && job.policy != policy_t.ATP) {
                partition_index();
                if (job.policy == policy_t.ESA) {
                    slot.lends = true;
                    if (job.part_size > 1) {
                        slot.has_second = true;
                        second_home_index();
                    }
                    if (job.part_size < (slot_idx_t)POOL_SIZE) {
                        slot.borrows = true;
                        outside_index();
                        if (slot.guest_idx >= job.part_base) {
                            slot.guest_idx = slot.guest_idx + job.part_size;
                        }
                    }
                }
            } else if (job.policy == policy_t.STATIC) {
                slot.no_slot = true;
            } else {
                hash_index(slot.idx);
                if (job.policy == policy_t.ESA) {
                    second_hash_index();
                    slot.has_second = slot.second_idx != slot.idx;
                }
            }
        }
    }
}

#endif

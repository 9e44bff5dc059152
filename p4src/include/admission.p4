// Admission: policy, job table, packet-type and worker checks, slot index.
// Rules A1-A7 of docs/dataplane.md.  Priority comes from the job table, never
// from the packet.
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

    action set_job(bit<8> fan_in, bit<32> worker_mask, bit<8> prio, port_t ps_port,
                   bit<16> mgid_all, bit<16> mgid_workers,
                   bit<32> part_base, bit<32> part_size) {
        job.fan_in = fan_in;
        job.worker_mask = worker_mask;
        job.prio = prio;
        job.ps_port = ps_port;
        job.mgid_all = mgid_all;
        job.mgid_workers = mgid_workers;
        job.part_base = part_base;
        job.part_size = part_size;
    }

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

    action hash_index() {
        hash(slot.idx, HashAlgorithm.crc32, (slot_idx_t)0, { esa.job, esa.seq },
             (bit<32>)POOL_SIZE);
    }

    // part_base + seq mod part_size: the hash extern takes a run-time
    // modulus where the % operator needs a constant.
    action partition_index() {
        hash(slot.idx, HashAlgorithm.identity, job.part_base, { esa.seq }, job.part_size);
    }

    apply {
        job.id = esa.job;
        policy.apply();
        if (esa.ptype != PTYPE_CONTRIB && esa.ptype != PTYPE_PS_RESULT &&
            esa.ptype != PTYPE_PULL && esa.ptype != PTYPE_FLOAT) {
            // A1: switch-only types (RESULT, FALLBACK, PARTIAL) and unknown ones.
            reject(drop_t.BAD_TYPE);
        } else if (jobs.apply().hit) {
            if (esa.ptype == PTYPE_FLOAT) {
                // A3: float resends go to the PS untouched.
                outcome.verdict = verdict_t.TO_PS;
                outcome.dest = dest_t.PS;
            } else if (esa.ptype != PTYPE_CONTRIB && ingress_port != job.ps_port) {
                // A4: PS_RESULT and PULL only from the job's PS port.
                reject(drop_t.BAD_TYPE);
            } else if (esa.ptype == PTYPE_PULL) {
                // A5: a PULL goes on to the workers.
                outcome.verdict = verdict_t.PS_PASS;
                outcome.dest = dest_t.WORKERS;
            } else if (esa.ptype == PTYPE_CONTRIB &&
                       (esa.bitmap == 0 || (esa.bitmap & (esa.bitmap - 1)) != 0 ||
                        (esa.bitmap & ~job.worker_mask) != 0)) {
                // A6: one bit, inside the job's worker set.
                reject(drop_t.SPOOFED_WORKER);
                outcome.ev1 = event_t.SPOOFED;
            } else {
                // A7: the chunk's slot (CONTRIB, PS_RESULT).  STATIC: in the
                // job's own partition; a job without one has no slot.
                // ESA, ATP: a hash over the whole pool.
                slot.to_pool = true;
                if (job.policy != policy_t.STATIC) {
                    hash_index();
                } else if (job.part_size != 0) {
                    partition_index();
                } else {
                    slot.no_slot = true;
                }
            }
        }
        // A2: an unknown job was rejected by the jobs table's default action.
    }
}

#endif

// Admission: policy, job table, packet-type and worker checks, slot index.
// Rules A1-A7 of docs/dataplane.md.  Priority comes from the job table, never
// from the packet.
#ifndef ESA_ADMISSION_P4
#define ESA_ADMISSION_P4

control Admission(inout headers_t hdr, inout metadata_t meta,
                  in standard_metadata_t std) {
    action set_policy(bit<8> policy, bit<48> stale_us) {
        meta.policy = policy;
        meta.stale_us = stale_us;
    }

    // No key: the controller rewrites the default action to switch policy.
    table policy {
        actions = { set_policy; }
        default_action = set_policy(POLICY_ESA, DEFAULT_STALE_US);
        size = 1;
    }

    action set_job(bit<8> fan_in, bit<32> worker_mask, bit<8> prio, port_t ps_port,
                   bit<16> mgid_all, bit<16> mgid_workers,
                   bit<32> part_base, bit<32> part_size) {
        meta.fan_in = fan_in;
        meta.worker_mask = worker_mask;
        meta.prio = prio;
        meta.ps_port = ps_port;
        meta.mgid_all = mgid_all;
        meta.mgid_workers = mgid_workers;
        meta.part_base = part_base;
        meta.part_size = part_size;
    }

    action reject(bit<32> reason) {
        meta.dest = DEST_DROP;
        meta.drop_reason = reason;
    }

    table jobs {
        key = { hdr.esa.job: exact; }
        actions = { set_job; @defaultonly reject; }
        default_action = reject(DROP_UNKNOWN_JOB);
        size = MAX_JOB_ID + 1;
    }

    action hash_index() {
        hash(meta.idx, HashAlgorithm.crc32, 32w0, { hdr.esa.job, hdr.esa.seq },
             (bit<32>)POOL_SIZE);
    }

    // part_base + seq mod part_size: the hash extern takes a run-time
    // modulus where the % operator needs a constant.
    action partition_index() {
        hash(meta.idx, HashAlgorithm.identity, meta.part_base, { hdr.esa.seq }, meta.part_size);
    }

    apply {
        meta.job = hdr.esa.job;
        policy.apply();
        if (hdr.esa.ptype != PTYPE_CONTRIB && hdr.esa.ptype != PTYPE_PS_RESULT &&
            hdr.esa.ptype != PTYPE_PULL && hdr.esa.ptype != PTYPE_FLOAT) {
            // A1: switch-only types (RESULT, FALLBACK, PARTIAL) and unknown ones.
            reject(DROP_BAD_TYPE);
        } else if (jobs.apply().hit) {
            if (hdr.esa.ptype == PTYPE_FLOAT) {
                // A3: float resends go to the PS untouched.
                meta.verdict = VERDICT_TO_PS;
                meta.dest = DEST_PS;
            } else if (hdr.esa.ptype != PTYPE_CONTRIB && std.ingress_port != meta.ps_port) {
                // A4: PS_RESULT and PULL only from the job's PS port.
                reject(DROP_BAD_TYPE);
            } else if (hdr.esa.ptype == PTYPE_PULL) {
                // A5: a PULL goes on to the workers.
                meta.verdict = VERDICT_PS_PASS;
                meta.dest = DEST_WORKERS;
            } else if (hdr.esa.ptype == PTYPE_CONTRIB &&
                       (hdr.esa.bitmap == 0 ||
                        (hdr.esa.bitmap & (hdr.esa.bitmap - 1)) != 0 ||
                        (hdr.esa.bitmap & ~meta.worker_mask) != 0)) {
                // A6: one bit, inside the job's worker set.
                reject(DROP_SPOOFED_WORKER);
                meta.ev1 = EV_SPOOFED;
            } else {
                // A7: the chunk's slot (CONTRIB, PS_RESULT).  STATIC: in the
                // job's own partition; a job without one has no slot.
                // ESA, ATP: a hash over the whole pool.
                meta.to_pool = 1;
                if (meta.policy != POLICY_STATIC) {
                    hash_index();
                } else if (meta.part_size != 0) {
                    partition_index();
                } else {
                    meta.no_slot = 1;
                }
            }
        }
        // A2: an unknown job was rejected by the jobs table's default action.
    }
}

#endif

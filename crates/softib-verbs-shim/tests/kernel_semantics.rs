//! Verb return values and errno as on Linux 6.1 + rdma-core 44 (kernel path, rxe):
//! `tests/c/kernel_semantics.c`, compiled against the installed verbs.h and libibverbs
//! and run with the shim preloaded, checks one rule per named check (bad arguments of
//! every create/modify/destroy verb, EBUSY on objects in use, errno after each failure,
//! `ibv_query_device_ex`, the GID type, EINTR from `ibv_get_cq_event`, the UD `wc.sl`).
//! Every check must print `ok NAME`. Needs cc and libibverbs-dev (.ci/run).

mod common;

/// The checks the C program must report as passed: a check that vanished from the
/// program (or stopped running) fails this test too.
const RULES: &[&str] = &[
    "open_device.while_forked_child_lives",
    "fork.child_keeps_no_device_socket",
    "fork.parent_keeps_device_socket",
    "query_device.vendor_id",
    "query_device_ex.real",
    "query_device_ex.bad_comp_mask",
    "query_gid_type.sysfs_roce_v2",
    "query_port.gid_tbl_len",
    "query_gid.empty_slot_is_zero",
    "query_gid.past_table",
    "query_gid_ex.empty_slot",
    "query_gid_ex.past_table",
    "query_gid_ex.roce_v2",
    "query_gid_table.valid_entries_only",
    "query_gid_type.empty_slot",
    "query_port.bad_port",
    "query_pkey.default",
    "query_pkey.past_table",
    "get_pkey_index.default",
    "get_pkey_index.absent",
    "context.num_comp_vectors",
    "create_cq.cqe_0",
    "create_cq.cqe_over_max",
    "create_cq.comp_vector_out_of_range",
    "create_cq.last_comp_vector",
    "destroy_cq.busy",
    "destroy_cq.after_qp",
    "destroy_comp_channel.busy",
    "get_cq_event.eintr",
    "destroy_comp_channel.idle",
    "reg_mr.length_0",
    "reg_mr.remote_write_needs_local_write",
    "reg_mr.remote_atomic_needs_local_write",
    "reg_mr.undefined_access_bit",
    "reg_mr.on_demand_with_odp",
    "reg_mr.relaxed_ordering_accepted",
    "reg_mr_iova.page_offset_differs",
    "reg_mr_iova.same_page_offset",
    "dealloc_pd.busy_with_mr",
    "dealloc_pd.idle",
    "create_qp.zero_send_wr",
    "create_qp.zero_recv_wr",
    "post_recv.zero_recv_wr_queue_full",
    "create_qp.send_wr_over_max",
    "create_qp.missing_cq",
    "create_qp.raw_packet",
    "post_recv.reset",
    "modify_qp.empty_mask",
    "modify_qp.bad_transition",
    "modify_qp.missing_required_attr",
    "modify_qp.unexpected_attr",
    "modify_qp.bad_port",
    "modify_qp.unsupported_mask",
    "modify_qp.state_field",
    "post_recv.too_many_sge",
    "post_send.before_rts",
    "modify_qp.rtr_without_grh",
    "modify_qp.av_port_0",
    "modify_qp.empty_sgid_index",
    "modify_qp.flow_label_low_20_bits",
    "query_qp.flow_label_masked",
    "modify_qp.timeout_over_31",
    "modify_qp.max_rd_atomic_over_max",
    "post_send.too_many_sge",
    "post_send.inline_too_long",
    "post_send.atomic_unaligned",
    "create_srq.max_wr_0",
    "create_srq.max_sge_over_max",
    "create_srq.max_sge_0_is_1",
    "modify_srq.limit_over_max",
    "post_recv.qp_on_srq",
    "post_srq_recv.too_many_sge",
    "destroy_srq.busy",
    "destroy_srq.idle",
    "create_ah.no_grh",
    "create_ah.bad_port",
    "create_ah.flow_label_low_20_bits",
    "ud_recv.wc_sl_is_roce_packet_type",
    "query_device.mcast_limits",
    "attach_mcast.unicast_gid",
    "attach_mcast.ud",
    "attach_mcast.again",
    "detach_mcast.attached",
    "detach_mcast.not_attached",
    "destroy_cq.discards_queued_events",
    "destroy_comp_channel.after_discard",
    "dealloc_pd.idle_at_end",
];

#[test]
fn verbs_fail_as_the_kernel_path_does() {
    let run = common::run_c_program(
        "kernel_semantics",
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        &["-libverbs"],
        "127.77.141.1",
        &[],
    );
    let missing: Vec<&str> = RULES
        .iter()
        .copied()
        .filter(|r| !run.stdout.lines().any(|l| l == format!("ok {r}")))
        .collect();
    assert!(
        run.status.is_some_and(|s| s.success()) && missing.is_empty(),
        "kernel_semantics ({:?}), rules not passed: {missing:?}\n{}",
        run.status,
        run.text
    );
    assert!(
        run.stdout.contains(&format!(
            "kernel_semantics: all {} checks passed",
            RULES.len()
        )),
        "the program runs checks this list does not name:\n{}",
        run.stdout
    );
}

//! Counters a user looks at when something is slow or failing, named as `rdma statistic`
//! shows them for mlx5 (kernel `drivers/infiniband/hw/mlx5/counters.c`: the q counters and
//! the port counters) and, where mlx5 has no equivalent, as rxe names them
//! (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`).
//!
//! Owns: [`Counters`] (one set per device, and one per QP). Must not: decide anything.

macro_rules! counters {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* $field:ident,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: u64,)*
        }

        impl $name {
            /// Every counter as `(name, value)`, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($field), self.$field)),*].into_iter()
            }

            /// Adds every counter of `other` to this one.
            pub fn add(&mut self, other: &Self) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

counters! {
    /// Packet, error and recovery counters.
    pub struct Counters {
        /// Packets sent (port_xmit_packets).
        port_xmit_packets,
        /// Packets received (port_rcv_packets).
        port_rcv_packets,
        /// Bytes sent, IP header through ICRC.
        port_xmit_data,
        /// Bytes received, IP header through ICRC.
        port_rcv_data,
        /// Packets the port dropped because they were larger than its Ethernet MTU (IP
        /// header through ICRC; RoCEv2 sets DF, so nothing fragments them). Per QP: the
        /// sender's. The transport retransmits them until it gives up (TRANSPORT_RETRY_EXC).
        tx_mtu_drops,
        /// RDMA WRITE requests received.
        rx_write_requests,
        /// RDMA READ requests received.
        rx_read_requests,
        /// Atomic requests received.
        rx_atomic_requests,
        /// SEND packets that found no receive WQE: RNR NAKs sent (mlx5 `out_of_buffer`, rxe
        /// `send_rnr_err`).
        out_of_buffer,
        /// Gaps in the request PSNs: a request beyond the expected PSN, answered with a PSN
        /// sequence error NAK; later ones of the same gap are dropped uncounted, as rxe
        /// `check_psn` does (mlx5 `out_of_sequence`, rxe `out_of_seq_request`).
        out_of_sequence,
        /// Duplicate requests received (re-ACKed or replayed).
        duplicate_request,
        /// RNR NAKs received.
        rnr_nak_received,
        /// Completions with RNR_RETRY_EXC_ERR.
        rnr_nak_retry_err,
        /// PSN sequence error NAKs received (mlx5 `packet_seq_err`, rxe `rcvd_seq_err`).
        packet_seq_err,
        /// ACK timeouts that found packets outstanding (mlx5 `local_ack_timeout_err`); each
        /// starts a retry or, with none left, fails the oldest WQE.
        local_ack_timeout_err,
        /// Responses that revealed a lost READ/atomic response by their PSN (an implied NAK,
        /// mlx5 `implied_nak_seq_err`); each starts a retry.
        implied_nak_seq_err,
        /// Go-back-N retry events: a timeout, a PSN sequence NAK or an implied NAK that rewound
        /// the send queue (rxe `completer_retry_err`, `RXE_CNT_COMP_RETRY`). The packets resent
        /// are counted by `retransmits`.
        completer_retry_err,
        /// Completions with TRANSPORT_RETRY_EXC_ERR.
        retry_exceeded_err,
        /// Packets retransmitted (go-back-N).
        retransmits,
        /// NAKs sent, every kind but RNR (sequence, invalid request, access, operational).
        naks_sent,
        /// PSN sequence error NAKs sent.
        nak_seq_sent,
        /// NAKs received, every kind but RNR (those are `rnr_nak_received`).
        naks_received,
        /// Remote operational error NAKs received.
        req_remote_operation_error,
        /// Receive length errors (message longer than the receive WQE).
        resp_local_length_error,
        /// Error CQEs on the receive side.
        resp_cqe_error,
        /// Error CQEs on the send side.
        req_cqe_error,
        /// INV_REQ NAKs received.
        req_remote_invalid_request,
        /// REM_ACCESS NAKs received.
        req_remote_access_errors,
        /// Remote access errors detected as responder.
        resp_remote_access_errors,
        /// Flushed receive WQEs.
        resp_cqe_flush_error,
        /// Flushed send WQEs.
        req_cqe_flush_error,
        /// Packets dropped because their ICRC was wrong.
        rx_icrc_errors,
        /// Packets dropped before transport processing (bad headers, unknown QP, wrong state).
        rx_discards,
        /// Packets for a connected (RC, UC) QP dropped because their IP source is not the
        /// QP's peer or their destination not the QP's own GID (rxe `check_addr`). Per QP:
        /// the QP they named.
        rx_addr_errors,
        /// Packets dropped because their BTH P_Key does not match the port's (the default
        /// 0xffff; rxe `check_keys`). Per QP: the QP they named.
        rx_pkey_errors,
        /// DMA accesses the IOMMU refused.
        dma_faults,
        /// Doorbells the device dropped (unknown QP, wrong UAR, malformed).
        doorbell_errors,
        /// Firmware commands executed.
        commands,
        /// Interrupts raised.
        interrupts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_by_name_and_adds() {
        let mut a = Counters {
            out_of_sequence: 2,
            ..Default::default()
        };
        a.add(&Counters {
            out_of_sequence: 3,
            retransmits: 1,
            ..Default::default()
        });
        let m: std::collections::BTreeMap<_, _> = a.iter().collect();
        assert_eq!(m["out_of_sequence"], 5);
        assert_eq!(m["retransmits"], 1);
        assert_eq!(m["port_xmit_packets"], 0);
    }
}

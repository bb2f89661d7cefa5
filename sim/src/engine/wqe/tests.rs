use super::*;
use crate::testkit::ctrl;
use zerocopy::IntoBytes;

fn lim(st: u8) -> Limits {
    Limits {
        qpn: 7,
        st,
        max_wqe_bytes: 1024,
        log_msg_max: 30,
    }
}

#[test]
fn parses_write_with_two_sges() {
    let mut b = ctrl(WqeOpcode::RDMA_WRITE, 3, 7, 4, 0);
    b.extend_from_slice(RaddrSeg::new(0x1000, 0x55).as_bytes());
    b.extend_from_slice(DataSeg::new(10, 1, 2).as_bytes());
    b.extend_from_slice(DataSeg::new(20, 3, 4).as_bytes());
    let w = parse(&b, 3, &lim(st::RC));
    assert_eq!(w.error, None);
    assert_eq!(
        (w.raddr, w.rkey, w.len, w.sges.len()),
        (0x1000, 0x55, 30, 2)
    );
    assert!(w.signaled);
}

#[test]
fn rejects_wrong_qpn_opcode_for_type_and_short_ds() {
    let b = ctrl(WqeOpcode::SEND, 0, 8, 1, 0);
    assert_eq!(
        parse(&b, 0, &lim(st::RC)).error,
        Some(CqeSyndrome::LOCAL_QP_OP_ERR)
    );
    let b = ctrl(WqeOpcode::RDMA_READ, 0, 7, 2, 0);
    let mut b2 = b.clone();
    b2.extend_from_slice(&[0; 16]);
    assert_eq!(
        parse(&b2, 0, &lim(st::UD)).error,
        Some(CqeSyndrome::LOCAL_QP_OP_ERR)
    );
    let b = ctrl(WqeOpcode::RDMA_WRITE, 0, 7, 1, 0);
    assert_eq!(
        parse(&b, 0, &lim(st::RC)).error,
        Some(CqeSyndrome::LOCAL_QP_OP_ERR)
    );
}

#[test]
fn zero_byte_count_means_two_gib_and_exceeds_the_message_limit() {
    let mut b = ctrl(WqeOpcode::SEND, 0, 7, 2, 0);
    b.extend_from_slice(DataSeg::new(0, 1, 2).as_bytes());
    assert_eq!(
        parse(&b, 0, &lim(st::RC)).error,
        Some(CqeSyndrome::LOCAL_LENGTH_ERR)
    );
}

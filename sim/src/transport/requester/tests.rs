use super::*;
use crate::frame::TxTrains;

/// The UDP link's segmented sends (15 packets of a 4 KiB MTU).
const UDP: TxTrains = crate::link::udp::GSO_TRAINS;
const MTU: u32 = 4096;
const MIB: u32 = 1 << 20;

/// A requester `in_flight` PSNs ahead of its oldest unacknowledged one, `cur_pkt` packets
/// into its WRITE, `noack` packets past the last AckReq.
fn req(in_flight: u32, cur_pkt: u32, noack: u32) -> ReqState {
    let mut r = ReqState::new(1000);
    r.psn = psn_add(r.una, in_flight);
    r.cur_pkt = cur_pkt;
    r.noack = noack;
    r
}

#[test]
fn a_4k_mtu_send_holds_15_packets() {
    assert_eq!(UDP.packets(MTU), 15);
    assert_eq!(UDP.packets(1024), 62);
    assert_eq!(UDP.packets(256), 64);
}

#[test]
fn without_trains_a_burst_takes_the_whole_window() {
    assert_eq!(burst_count(None, MTU, &req(64, 130, 0), MIB), 64);
    assert_eq!(burst_count(None, MTU, &req(0, 0, 0), MIB), 128);
}

#[test]
fn a_window_cut_burst_ends_where_a_send_ends() {
    // From the message's start: the WRITE_FIRST and the next packet, then 15 at a time:
    // 2 + 8 * 15 = 122 of the 128 the window allows.
    assert_eq!(burst_count(Some(UDP), MTU, &req(0, 0, 0), MIB), 122);
    // From an end (122) with 64 PSNs open: 60, four full sends.
    assert_eq!(burst_count(Some(UDP), MTU, &req(64, 122, 0), MIB), 60);
    // Starting off an end (a retransmission from packet 5): to the last end that fits.
    assert_eq!(burst_count(Some(UDP), MTU, &req(0, 5, 0), MIB), 117);
}

#[test]
fn the_rest_of_a_message_goes_whole_even_if_it_fills_no_send() {
    // 4 packets left of a 256-packet message, window open: all 4.
    assert_eq!(burst_count(Some(UDP), MTU, &req(64, 252, 0), MIB), 4);
}

/// [`train_wait`] on the count [`burst_count`] gives (as the requester's step calls it).
fn waits(trains: Option<crate::frame::TxTrains>, req: &ReqState, len: u32) -> bool {
    train_wait(MTU, req, len, burst_count(trains, MTU, req, len))
}

#[test]
fn an_empty_write_never_waits_for_a_train() {
    assert!(!waits(Some(UDP), &req(118, 0, 20), 0));
    assert!(!waits(Some(UDP), &req(0, 0, 0), 0));
    // One that has packets left and less than a send of window does.
    assert!(waits(Some(UDP), &req(118, 122, 20), MIB));
    assert!(!waits(None, &req(118, 122, 20), MIB));
}

#[test]
fn less_than_a_send_waits_only_while_an_ack_is_on_its_way() {
    // 10 PSNs open, 118 in flight, the last AckReq 20 packets ago: wait for its ACK.
    assert_eq!(burst_count(Some(UDP), MTU, &req(118, 122, 20), MIB), 0);
    // No packet in flight asks for an ACK (the last AckReq is older than all of them):
    // the window's 10 go out, or nothing would ever open it.
    assert_eq!(burst_count(Some(UDP), MTU, &req(118, 122, 118), MIB), 10);
}

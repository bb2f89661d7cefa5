-- A Wireshark/tshark post-dissector for the RoCEv2 congestion notification packet (CNP).
--
-- tshark 4.0 (Debian bookworm's) decodes a CNP's BTH but calls opcode 0x81 "Unknown (129)",
-- shows the FECN/BECN byte as "Reserved" and the rest as vendor data. This adds a "RoCEv2 CNP"
-- tree with the fields IBTA annex A17.9.3 defines: the BECN bit (bit 6 of BTH byte 4, which a
-- CNP must set), the destination QP (the sender whose packet was marked), the PSN (0), the 16
-- reserved bytes (zero) and the ICRC, plus the IP ECN code point of the packet carrying it.
--
-- Use: tshark -X lua_script:scripts/wireshark/roce_cnp.lua -r capture.pcap -Y roce_cnp
-- Fields: roce_cnp.becn, roce_cnp.dest_qp, roce_cnp.psn, roce_cnp.reserved_zero,
-- roce_cnp.icrc. It reads only the UDP payload of packets to port 4791 whose first byte is 0x81.

local cnp = Proto("roce_cnp", "RoCEv2 Congestion Notification Packet")
local f_becn = ProtoField.bool("roce_cnp.becn", "BECN", 8, nil, 0x40)
local f_fecn = ProtoField.bool("roce_cnp.fecn", "FECN", 8, nil, 0x80)
local f_qp = ProtoField.uint24("roce_cnp.dest_qp", "Destination QP", base.HEX)
local f_psn = ProtoField.uint24("roce_cnp.psn", "PSN", base.DEC)
local f_pkey = ProtoField.uint16("roce_cnp.pkey", "P_Key", base.HEX)
local f_zero = ProtoField.bool("roce_cnp.reserved_zero", "Reserved bytes all zero")
local f_icrc = ProtoField.uint32("roce_cnp.icrc", "ICRC", base.HEX)
cnp.fields = { f_becn, f_fecn, f_qp, f_psn, f_pkey, f_zero, f_icrc }

local udp_dport = Field.new("udp.dstport")
local udp_payload = Field.new("udp.payload")

-- BTH (12) + 16 reserved bytes + ICRC (4).
local CNP_LEN = 32

function cnp.dissector(_, pinfo, tree)
    local dport = udp_dport()
    local payload = udp_payload()
    if dport == nil or payload == nil or dport() ~= 4791 then
        return
    end
    local range = payload.range
    if range:len() < CNP_LEN or range(0, 1):uint() ~= 0x81 then
        return
    end
    local t = tree:add(cnp, range(0, CNP_LEN))
    t:add(f_pkey, range(2, 2))
    t:add(f_fecn, range(4, 1))
    t:add(f_becn, range(4, 1))
    t:add(f_qp, range(5, 3))
    t:add(f_psn, range(9, 3))
    local zero = true
    for i = 12, 27 do
        if range(i, 1):uint() ~= 0 then
            zero = false
        end
    end
    t:add(f_zero, range(12, 16), zero)
    t:add(f_icrc, range(28, 4))
    pinfo.cols.protocol = "RoCE CNP"
    pinfo.cols.info = string.format("CNP to QP 0x%06x%s", range(5, 3):uint(),
        bit.band(range(4, 1):uint(), 0x40) ~= 0 and ", BECN" or ", BECN missing")
end

register_postdissector(cnp)

/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/*
 * Every opcode of this protocol version with its name, in numeric order: the
 * one list that code iterating over opcodes (the service's metrics and logs,
 * tests) reads, so that a new opcode is named in one place. User space only;
 * include it after protocol/harmonaize.h (the contract includes nothing).
 */
#ifndef HARMONAIZE_PROTOCOL_OPCODES_H
#define HARMONAIZE_PROTOCOL_OPCODES_H

struct hz_opcode_name {
	uint16_t opcode;
	const char *name;
};

static const struct hz_opcode_name hz_opcode_names[] = {
	{HZ_OP_HELLO, "HELLO"},
	{HZ_OP_REGION_REGISTER, "REGION_REGISTER"},
	{HZ_OP_REGION_UNREGISTER, "REGION_UNREGISTER"},
	{HZ_OP_COMM_UID, "COMM_UID"},
	{HZ_OP_COMM_INIT, "COMM_INIT"},
	{HZ_OP_COMM_DESTROY, "COMM_DESTROY"},
	{HZ_OP_COMM_ABORT, "COMM_ABORT"},
	{HZ_OP_ALLREDUCE, "ALLREDUCE"},
	{HZ_OP_BROADCAST, "BROADCAST"},
	{HZ_OP_REDUCE, "REDUCE"},
	{HZ_OP_ALLGATHER, "ALLGATHER"},
	{HZ_OP_REDUCE_SCATTER, "REDUCE_SCATTER"},
	{HZ_OP_ALLTOALL, "ALLTOALL"},
	{HZ_OP_SEND, "SEND"},
	{HZ_OP_RECV, "RECV"},
	{HZ_OP_BARRIER, "BARRIER"},
	{HZ_OP_CKPT_POLICY, "CKPT_POLICY"},
	{HZ_OP_CKPT_SAVE, "CKPT_SAVE"},
	{HZ_OP_CKPT_RESTORE, "CKPT_RESTORE"},
	{HZ_OP_CKPT_LIST, "CKPT_LIST"},
	{HZ_OP_CKPT_DELETE, "CKPT_DELETE"},
	{HZ_OP_CKPT_QUIESCE, "CKPT_QUIESCE"},
	{HZ_OP_EVENT_SUBSCRIBE, "EVENT_SUBSCRIBE"},
	{HZ_OP_EVENT_ACK, "EVENT_ACK"},
	{HZ_OP_TOPOLOGY_GET, "TOPOLOGY_GET"},
	{HZ_OP_NEG_REQUEST, "NEG_REQUEST"},
	{HZ_OP_NEG_ACCEPT, "NEG_ACCEPT"},
	{HZ_OP_NEG_DECLINE, "NEG_DECLINE"},
	{HZ_OP_NEG_COUNTER, "NEG_COUNTER"},
	{HZ_OP_NEG_RELEASE, "NEG_RELEASE"},
	{HZ_OP_HINT_DECLARE, "HINT_DECLARE"},
	{HZ_OP_ENERGY_SLACK, "ENERGY_SLACK"},
};

#define HZ_NUM_OPCODES (sizeof(hz_opcode_names) / sizeof(hz_opcode_names[0]))

#endif /* HARMONAIZE_PROTOCOL_OPCODES_H */

// SPDX-License-Identifier: GPL-2.0-only
/*
 * Compile-only check that protocol/harmonaize.h builds inside the kernel with
 * the __le types, that its layout asserts hold there too, and that its inline
 * helpers (hz_coll_bytes and the opcode predicates) compile as kernel code.
 */
#include <linux/module.h>

#include "harmonaize.h"

static int __init hz_header_check_init(void)
{
	struct hz_req_hdr hdr = { .opcode = cpu_to_le16(HZ_OP_HELLO) };
	hz_u64 send, recv;

	BUILD_BUG_ON(sizeof(struct hz_coll_args) != 80);
	if (hz_coll_bytes(HZ_OP_REDUCE, 2, HZ_FP32, 4, hz_op_rooted(HZ_OP_REDUCE),
			  &send, &recv) != HZ_S_OK || send != 8 || recv != 8)
		return -EINVAL;
	return le16_to_cpu(hdr.opcode) == HZ_OP_HELLO ? 0 : -EINVAL;
}

static void __exit hz_header_check_exit(void)
{
}

module_init(hz_header_check_init);
module_exit(hz_header_check_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("HarmonAIze protocol header compile check");

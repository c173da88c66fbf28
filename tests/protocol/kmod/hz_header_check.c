// SPDX-License-Identifier: GPL-2.0-only
/*
 * Compile-only check that protocol/harmonaize.h builds inside the kernel with
 * the __le types, and that its layout asserts hold there too.
 */
#include <linux/module.h>

#include "harmonaize.h"

static int __init hz_header_check_init(void)
{
	struct hz_req_hdr hdr = { .opcode = cpu_to_le16(HZ_OP_HELLO) };

	BUILD_BUG_ON(sizeof(struct hz_coll_args) != 80);
	return le16_to_cpu(hdr.opcode) == HZ_OP_HELLO ? 0 : -EINVAL;
}

static void __exit hz_header_check_exit(void)
{
}

module_init(hz_header_check_init);
module_exit(hz_header_check_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("HarmonAIze protocol header compile check");

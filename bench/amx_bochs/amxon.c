// Test-only kernel module for run.sh: turns on the AMX tile state in XCR0. Bochs implements
// AMX but not XFD, without which Linux keeps tile data out of XCR0 (and setting tile config
// alone faults at boot, hence clearcpuid=amx_tile on the guest's command line); the guest
// runs one single-threaded process, so no other task's state is at stake.
#include <linux/module.h>
#include <linux/smp.h>
#include <asm/fpu/xcr.h>

static void amx_on(void *unused)
{
	xsetbv(XCR_XFEATURE_ENABLED_MASK, xgetbv(XCR_XFEATURE_ENABLED_MASK) | 0x60000);
}

static int __init amxon_init(void)
{
	on_each_cpu(amx_on, NULL, 1);
	pr_info("amxon: XCR0 = %llx\n", xgetbv(XCR_XFEATURE_ENABLED_MASK));
	return 0;
}

static void __exit amxon_exit(void)
{
}

module_init(amxon_init);
module_exit(amxon_exit);
MODULE_LICENSE("Dual MIT/GPL");

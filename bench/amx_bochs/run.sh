#!/bin/sh
# The AMX int8 convolution on real tiles without an AMX machine: amx_check.cpp, built
# statically from framework/csrc, runs as the init of a Linux guest booted in Bochs 3.0 (its
# Sapphire Rapids model implements AMX), and compares the real tiles with the VNNI algorithm
# and with the emulated tiles the test suite checks. Prints the guest's AMXCHECK lines; exit
# status 0 when they all agree. CHECK=isa runs isa_check.cpp instead (every ISA path of the
# convolution against the generic one; ISACHECK lines) on MODEL (arrow_lake: AVX2 with
# AVX-VNNI and no AVX-512; sapphire_rapids, the default: AVX-512 VNNI too); CHECK=bn runs
# bn_check.cpp (the batch norm's fused forms against the separate ops on each ISA path;
# BNCHECK lines).
#
#   sudo sh bench/amx_bochs/run.sh          # about 2 minutes of setup, 2 of Bochs
#   sudo CHECK=isa MODEL=arrow_lake sh bench/amx_bochs/run.sh
#   sudo CHECK=bn sh bench/amx_bochs/run.sh
#
# Needs root (debootstrap, chroot), g++ with -mamx-tile, and the Debian mirror (the guest and
# Bochs come from Debian trixie, unpacked under $AMX_BOCHS_ROOT, default
# /tmp/tianyuan-amx-bochs, and reused by later runs). Found with it: GCC 12's
# _tile_loadconfig dropped our tile configuration (int8_tiles_amx.cpp). Bochs's own limits
# are worked around here: no XFD (so the guest boots with clearcpuid=amx_tile and amxon.ko
# sets XCR0's tile bits), no 5-level paging in SMM (no5lvl, acpi=off), and a TDPBUSD that
# reads the s8 operand as u8 (amx_check.cpp uses weights 0..127).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
CSRC="$HERE/../../framework/csrc"
ROOT=${AMX_BOCHS_ROOT:-/tmp/tianyuan-amx-bochs}
WORK="$ROOT/work"
CHECK=${CHECK:-amx}
MODEL=${MODEL:-sapphire_rapids}
TAG=$(echo "$CHECK" | tr a-z A-Z)CHECK

if [ ! -x "$ROOT/usr/bin/bochs" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
    debootstrap --variant=minbase trixie "$ROOT" http://deb.debian.org/debian
    cp /etc/resolv.conf "$ROOT/etc/"
    chroot "$ROOT" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install \
        -y -q --no-install-recommends bochs bochsbios vgabios isolinux syslinux-common \
        xorriso cpio busybox-static linux-image-amd64 linux-headers-amd64 make gcc"
fi
KVER=$(ls "$ROOT/lib/modules" | head -1)
rm -rf "$WORK" && mkdir -p "$WORK/obj" "$WORK/mod" "$WORK/initrd/bin" "$WORK/initrd/proc" \
    "$WORK/iso/isolinux"

# the checker: every kernel unit but the Python bindings, each with its ISA's flags as
# setup.py gives them (its ISA_FLAGS, by the file name's last suffix; a list kept here had
# missed the *_vbmi unit)
isa_flags() {
    python3 - "$HERE/../../setup.py" "$1" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
flags = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
             and getattr(n.targets[0], "id", "") == "ISA_FLAGS")
print(" ".join(flags.get(sys.argv[2].rsplit("_", 1)[-1], [])))
PY
}
for src in $(find "$CSRC" -name '*.cpp') "$HERE/${CHECK}_check.cpp"; do
    name=$(basename "$src" .cpp)
    case "$name" in bind*) continue ;; esac
    isa=$(isa_flags "$name")
    echo "g++ -std=c++17 -O2 -fopenmp -fno-math-errno $isa -I$CSRC -c $src -o $WORK/obj/$name.o"
done | xargs -P "$(nproc)" -I{} sh -c "{}"
g++ -static -fopenmp "$WORK"/obj/*.o -o "$WORK/initrd/check" 2>/dev/null

cp "$HERE/amxon.c" "$WORK/mod/" && echo "obj-m := amxon.o" > "$WORK/mod/Makefile"
chroot "$ROOT" make -s -C "/usr/src/linux-headers-$KVER" M=/work/mod modules
cp "$WORK/mod/amxon.ko" "$ROOT/bin/busybox" "$WORK/initrd/" && mv "$WORK/initrd/busybox" \
    "$WORK/initrd/bin/"
cat > "$WORK/initrd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
[ "$(cat /check.kind)" = amx ] && /bin/busybox insmod /amxon.ko
OMP_NUM_THREADS=1 AMXCHECK_REAL=1 /check
echo "CHECK exit $?"
/bin/busybox sleep 5
/bin/busybox poweroff -f
EOF
chmod +x "$WORK/initrd/init"
echo "$CHECK" > "$WORK/initrd/check.kind"  # amxon.ko sets XCR0's tile bits: AMX models only
chroot "$ROOT" sh -c "cd /work/initrd && find . | cpio -o -H newc 2>/dev/null | gzip -1 \
    > /work/iso/initrd.gz"
cp "$ROOT/boot/vmlinuz-$KVER" "$WORK/iso/vmlinuz"
cp "$ROOT/usr/lib/ISOLINUX/isolinux.bin" "$ROOT/usr/lib/syslinux/modules/bios/ldlinux.c32" \
    "$WORK/iso/isolinux/"
cat > "$WORK/iso/isolinux/isolinux.cfg" <<'EOF'
DEFAULT linux
PROMPT 0
LABEL linux
  KERNEL /vmlinuz
  APPEND initrd=/initrd.gz console=ttyS0 nokaslr nosmp rdinit=/init CLEARCPUID no5lvl acpi=off
EOF
sed -i "s/CLEARCPUID/clearcpuid=amx_tile,amx_bf16,amx_int8/" "$WORK/iso/isolinux/isolinux.cfg"
chroot "$ROOT" xorriso -as mkisofs -quiet -o /work/boot.iso -b isolinux/isolinux.bin \
    -c isolinux/boot.cat -no-emul-boot -boot-load-size 4 -boot-info-table /work/iso
cat > "$WORK/bochsrc" <<'EOF'
megs: 512
cpu: model=MODEL, count=1, ips=100000000
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/bochs/VGABIOS-lgpl-latest
ata0-master: type=cdrom, path=/work/boot.iso, status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev=/work/serial.txt
display_library: rfb, options="timeout=0"
log: /work/bochs.log
clock: sync=none
EOF
sed -i "s/model=MODEL/model=$MODEL/" "$WORK/bochsrc"
# the guest halts when done (no ACPI power-off): stop Bochs once the checker has reported
chroot "$ROOT" timeout 1200 bochs -q -f /work/bochsrc > "$WORK/bochs.out" 2>&1 &
bochs=$!
while kill -0 "$bochs" 2>/dev/null && ! grep -a -q "CHECK exit" "$WORK/serial.txt" 2>/dev/null
do
    sleep 2
done
sleep 2 && kill "$bochs" 2>/dev/null || true
grep -a "$TAG\|CHECK exit" "$WORK/serial.txt" ||
    { echo "no $TAG output: see $WORK/bochs.log"; exit 1; }
grep -a -q "$TAG.*ALL EQUAL" "$WORK/serial.txt"

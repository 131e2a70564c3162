// Package pause makes the pod sandbox's image, registry.k8s.io/pause, on a
// machine that cannot pull it.
//
// podvisor cannot compile at run time and should not copy its own 240 MB
// binary into an image, so the pause program is written here as machine code:
// a static ELF of 268 bytes, against upstream's 300-700 KB C binary or 1.4 MB
// for the same program in Go. It does what upstream's pause.c does as PID 1
// of a pod: it exits 0 on SIGINT or SIGTERM, and it sets SIGCHLD to SIG_IGN so
// that the kernel reaps every child reparented to it (upstream reaps them in
// a SIGCHLD handler; the effect is the same: no zombies).
package pause

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

// ImageName is the sandbox image containerd is configured with, as upstream.
const ImageName = "registry.k8s.io/pause:3.10.2"

// Image is the pause image for this machine's architecture, shaped as
// upstream's: /pause as the entrypoint, run as 65535:65535.
func Image() (imagebuild.Image, error) {
	bin, err := Binary(runtime.GOARCH)
	if err != nil {
		return imagebuild.Image{}, err
	}
	return imagebuild.Image{
		Names: []string{ImageName},
		Config: imagebuild.Config{
			Entrypoint: []string{"/pause"},
			User:       "65535:65535",
		},
		Files: []imagebuild.File{imagebuild.Regular("/pause", 0o755, bin)},
	}, nil
}

// Binary returns the pause program for goarch as a static ELF executable.
func Binary(goarch string) ([]byte, error) {
	switch goarch {
	case "amd64":
		return elf64(elfMachineX86_64, amd64Code), nil
	}
	return nil, fmt.Errorf("pause: no pause program for %s (only amd64)", goarch)
}

// amd64Code is position-independent; assembled from (GNU as, AT&T syntax):
//
//	_start:
//		lea on_signal(%rip), %rax
//		push $0            // struct sigaction on the stack: sa_mask,
//		push %rax          // sa_restorer (x86-64 needs one; the handler never returns),
//		push $0x04000000   // sa_flags = SA_RESTORER,
//		push %rax          // sa_handler
//		mov %rsp, %rsi
//		xor %edx, %edx     // no old action
//		mov $8, %r10d      // sizeof(sigset_t)
//		mov $2, %edi       // SIGINT
//		mov $13, %eax      // rt_sigaction
//		syscall
//		mov $15, %edi      // SIGTERM
//		mov $13, %eax
//		syscall
//		push $0
//		push $0
//		push $0
//		push $1            // SIG_IGN
//		mov %rsp, %rsi
//		mov $17, %edi      // SIGCHLD
//		mov $13, %eax
//		syscall
//	1:	mov $34, %eax      // pause
//		syscall
//		jmp 1b
//	on_signal:
//		xor %edi, %edi
//		mov $231, %eax     // exit_group(0)
//		syscall
var amd64Code = []byte{
	0x48, 0x8d, 0x05, 0x4c, 0x00, 0x00, 0x00, 0x6a, 0x00, 0x50, 0x68, 0x00,
	0x00, 0x00, 0x04, 0x50, 0x48, 0x89, 0xe6, 0x31, 0xd2, 0x41, 0xba, 0x08,
	0x00, 0x00, 0x00, 0xbf, 0x02, 0x00, 0x00, 0x00, 0xb8, 0x0d, 0x00, 0x00,
	0x00, 0x0f, 0x05, 0xbf, 0x0f, 0x00, 0x00, 0x00, 0xb8, 0x0d, 0x00, 0x00,
	0x00, 0x0f, 0x05, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x00, 0x6a, 0x01, 0x48,
	0x89, 0xe6, 0xbf, 0x11, 0x00, 0x00, 0x00, 0xb8, 0x0d, 0x00, 0x00, 0x00,
	0x0f, 0x05, 0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, 0x31,
	0xff, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x0f, 0x05,
}

const (
	elfMachineX86_64 = 62
	elfHeaderSize    = 64
	elfPhdrSize      = 56
	loadAddress      = 0x400000
)

// elf64 wraps code in a little-endian ELF64 executable with two program
// headers: one read+execute segment mapping the whole file, and
// PT_GNU_STACK asking for a non-executable stack.
func elf64(machine uint16, code []byte) []byte {
	const phnum = 2
	codeOff := uint64(elfHeaderSize + phnum*elfPhdrSize)
	size := codeOff + uint64(len(code))
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */, 0 /* System V ABI */}
	b = append(b, make([]byte, 8)...)
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, machine)
	b = le.AppendUint32(b, 1) // version
	b = le.AppendUint64(b, loadAddress+codeOff)
	b = le.AppendUint64(b, elfHeaderSize) // program headers follow the header
	b = le.AppendUint64(b, 0)             // no section headers
	b = le.AppendUint32(b, 0)             // flags
	b = le.AppendUint16(b, elfHeaderSize)
	b = le.AppendUint16(b, elfPhdrSize)
	b = le.AppendUint16(b, phnum)
	b = le.AppendUint16(b, 64) // section header size, though there are none
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	phdr := func(typ, flags uint32, off, addr, filesz, align uint64) {
		b = le.AppendUint32(b, typ)
		b = le.AppendUint32(b, flags)
		b = le.AppendUint64(b, off)
		b = le.AppendUint64(b, addr)
		b = le.AppendUint64(b, addr) // physical address
		b = le.AppendUint64(b, filesz)
		b = le.AppendUint64(b, filesz) // memory size
		b = le.AppendUint64(b, align)
	}
	phdr(1 /* PT_LOAD */, 5 /* R+X */, 0, loadAddress, size, 0x1000)
	phdr(0x6474e551 /* PT_GNU_STACK */, 6 /* R+W */, 0, 0, 0, 16)
	return append(b, code...)
}

package kernel

import "strconv"

// Reasons of a BLOCKED interval, and sub-states of RUNQUEUE. The strings are
// the snapshot format (see the package doc).
const (
	ReasonPreempted = "preempted" // RUNQUEUE: preempted while runnable (CPU contention)
	ReasonWakeup    = "wakeup"    // RUNQUEUE: woken or unthrottled, waiting for a CPU (contention)
	ReasonNew       = "new"       // RUNQUEUE: a new thread's first wait
	ReasonThrottled = "throttled" // RUNQUEUE: its cgroup's CFS quota ran out, until the unthrottle
	// ReasonSteal: RUNQUEUE, the part of a run on a CPU the thread did not
	// get: the hypervisor ran another virtual CPU (steal time), or, on
	// kernels that account interrupt time, interrupts ran. The kernel tells
	// how long, not when within the run: the interval is put at its end.
	ReasonSteal     = "steal"
	ReasonLock      = "lock"      // BLOCKED: futex (mutexes, condition variables), flock, semaphores
	ReasonNetwork   = "network"   // BLOCKED: socket I/O, poll/select/epoll
	ReasonDisk      = "disk"      // BLOCKED: file I/O, fsync, io_schedule (with Interval.Device)
	ReasonTimer     = "timer"     // BLOCKED: sleeps
	ReasonSyscall   = "syscall"   // BLOCKED: another syscall (wait4, pipes, ttys…)
	ReasonPageFault = "pagefault" // BLOCKED: outside any syscall: a page fault (file read, swap-in)
	ReasonMemory    = "memory"    // BLOCKED: a memory stall: reclaim, compaction, thrashing, memory.high
	ReasonKernel    = "kernel"    // BLOCKED: a kernel thread waiting (not for I/O)
	ReasonUnknown   = "unknown"   // BLOCKED: the syscall was not seen
	// ReasonGIL: BLOCKED on a futex of the language runtime's global
	// interpreter lock (CPython's GIL, interp.go): waiting for the
	// process's own code to let the interpreter go.
	ReasonGIL = "gil"
)

// File types of an fd (S_IFMT >> 12), as the switch record's Detail.
const (
	fileFIFO = 0x1
	fileChr  = 0x2
	fileDir  = 0x4
	fileBlk  = 0x6
	fileReg  = 0x8
	fileSock = 0xc
)

// sysInfo names an x86-64 syscall and gives the reason a thread blocked in it.
type sysInfo struct {
	name   string
	reason uint8
	fdArg  bool // reason depends on the fd's type (read/write-like calls)
}

// Futex syscalls whose first argument, the futex word's address, the
// switch record carries (Detail: low half, Dev: high half).
const (
	sysFutex     = 202
	sysFutexWait = 455
)

// syscallsAMD64 lists the x86-64 syscalls threads commonly block in. Others
// block with ReasonSyscall and their number as name.
var syscallsAMD64 = map[int32]sysInfo{
	0:   {"read", rSyscall, true},
	1:   {"write", rSyscall, true},
	7:   {"poll", rNetwork, false},
	17:  {"pread64", rDisk, true},
	18:  {"pwrite64", rDisk, true},
	19:  {"readv", rSyscall, true},
	20:  {"writev", rSyscall, true},
	23:  {"select", rNetwork, false},
	34:  {"pause", rSyscall, false},
	35:  {"nanosleep", rTimer, false},
	42:  {"connect", rNetwork, false},
	43:  {"accept", rNetwork, false},
	44:  {"sendto", rNetwork, false},
	45:  {"recvfrom", rNetwork, false},
	46:  {"sendmsg", rNetwork, false},
	47:  {"recvmsg", rNetwork, false},
	61:  {"wait4", rSyscall, false},
	65:  {"semop", rLock, false},
	72:  {"fcntl", rLock, false},
	73:  {"flock", rLock, false},
	74:  {"fsync", rDisk, false},
	75:  {"fdatasync", rDisk, false},
	76:  {"truncate", rDisk, false},
	77:  {"ftruncate", rDisk, false},
	162: {"sync", rDisk, false},
	202: {"futex", rLock, false},
	220: {"semtimedop", rLock, false},
	208: {"io_getevents", rDisk, false},
	230: {"clock_nanosleep", rTimer, false},
	232: {"epoll_wait", rNetwork, false},
	247: {"waitid", rSyscall, false},
	257: {"openat", rDisk, false},
	270: {"pselect6", rNetwork, false},
	271: {"ppoll", rNetwork, false},
	277: {"sync_file_range", rDisk, false},
	285: {"fallocate", rDisk, false},
	281: {"epoll_pwait", rNetwork, false},
	288: {"accept4", rNetwork, false},
	295: {"preadv", rDisk, true},
	296: {"pwritev", rDisk, true},
	299: {"recvmmsg", rNetwork, false},
	306: {"syncfs", rDisk, false},
	307: {"sendmmsg", rNetwork, false},
	327: {"preadv2", rDisk, true},
	328: {"pwritev2", rDisk, true},
	426: {"io_uring_enter", rSyscall, false},
	441: {"epoll_pwait2", rNetwork, false},
	449: {"futex_waitv", rLock, false},
	455: {"futex_wait", rLock, false},
}

// maxSyscall bounds the syscall numbers kept in sysTable (x86-64 has ~460).
const maxSyscall = 1024

// sysTable is syscallsAMD64 indexed by number, with the name "syscall_N"
// of the others: the builder looks a syscall up per blocking switch.
var sysTable = func() []sysInfo {
	t := make([]sysInfo, maxSyscall)
	for nr := range t {
		t[nr] = sysInfo{name: "syscall_" + itoa(int64(nr)), reason: rSyscall}
	}
	for nr, info := range syscallsAMD64 {
		t[nr] = info
	}
	return t
}()

func sysInfoOf(nr int32) sysInfo {
	if nr >= 0 && nr < maxSyscall {
		return sysTable[nr]
	}
	return sysInfo{name: "syscall_" + itoa(int64(nr)), reason: rSyscall}
}

// syscallName names a syscall number.
func syscallName(nr int32) string { return sysInfoOf(nr).name }

// blockReason maps the switch record of a thread that blocked to a reason
// and the syscall it is in (noSyscall outside syscalls). A memory stall
// (reclaim, compaction, thrashing) is "memory" whatever the syscall or
// fault it happened in; io_schedule is "disk" where the syscall says no
// better.
func blockReason(ev *Event) (reason uint8, sys int32) {
	mem, io := ev.Flags&FlagMemStall != 0, ev.Flags&FlagIOWait != 0
	if ev.Flags&FlagKthread != 0 {
		switch {
		case mem:
			return rMemory, noSyscall
		case io:
			return rDisk, noSyscall
		}
		return rKernel, noSyscall
	}
	switch ev.Syscall {
	case SysNone:
		if mem {
			return rMemory, noSyscall
		}
		return rPageFault, noSyscall
	case SysUnknown:
		switch {
		case mem:
			return rMemory, noSyscall
		case io:
			return rDisk, noSyscall
		}
		return rUnknown, noSyscall
	}
	info := sysInfoOf(ev.Syscall)
	reason = info.reason
	if info.fdArg {
		switch ev.Detail {
		case fileSock:
			reason = rNetwork
		case fileReg, fileBlk, fileDir:
			reason = rDisk
		case fileFIFO, fileChr:
			reason = rSyscall
		}
	}
	switch {
	case mem:
		reason = rMemory
	case io && (reason == rSyscall || reason == rUnknown):
		reason = rDisk
	}
	return reason, ev.Syscall
}

// softirqNames are the softirq vectors (softirq_entry's print fmt).
var softirqNames = [...]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// wakeContext names the context a wakeup ran in (a waking record's Ctx and
// Detail): "thread" (an edge from the waker thread), "timer", "network",
// "disk", "hardirq" or "softirq", with a detail (softirq vector name, irq
// number).
func wakeContext(ctx uint8, det uint32) (string, string) {
	switch ctx {
	case CtxHrtimer:
		return CtxNameTimer, "hrtimer"
	case CtxBlockIRQ:
		return CtxNameDisk, "irq " + itoa(int64(det))
	case CtxHardirq:
		return CtxNameHardirq, "irq " + itoa(int64(det))
	case CtxSoftirq:
		name := "vec " + itoa(int64(det))
		if int(det) < len(softirqNames) {
			name = softirqNames[det]
		}
		switch det {
		case 1, 8: // TIMER, HRTIMER
			return CtxNameTimer, name
		case 2, 3: // NET_TX, NET_RX
			return CtxNameNetwork, name
		case 4, 5: // BLOCK, IRQ_POLL
			return CtxNameDisk, name
		}
		return CtxNameSoftirq, name
	}
	return CtxNameThread, ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

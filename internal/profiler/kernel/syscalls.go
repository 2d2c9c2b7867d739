package kernel

import "strconv"

// Reasons of a BLOCKED interval, and sub-states of RUNQUEUE. The strings are
// the snapshot format (see the package doc).
const (
	ReasonPreempted = "preempted" // RUNQUEUE: preempted while runnable (CPU contention)
	ReasonWakeup    = "wakeup"    // RUNQUEUE: woken or unthrottled, waiting for a CPU (contention)
	ReasonNew       = "new"       // RUNQUEUE: a new thread's first wait
	ReasonThrottled = "throttled" // RUNQUEUE: its cgroup's CFS quota ran out, until the unthrottle
	ReasonLock      = "lock"      // BLOCKED: futex (mutexes, condition variables), flock, semaphores
	ReasonNetwork   = "network"   // BLOCKED: socket I/O, poll/select/epoll
	ReasonDisk      = "disk"      // BLOCKED: file I/O, fsync, io_schedule (with Interval.Device)
	ReasonTimer     = "timer"     // BLOCKED: sleeps
	ReasonSyscall   = "syscall"   // BLOCKED: another syscall (wait4, pipes, ttys…)
	ReasonPageFault = "pagefault" // BLOCKED: outside any syscall: a page fault (file read, swap-in)
	ReasonMemory    = "memory"    // BLOCKED: a memory stall: reclaim, compaction, thrashing, memory.high
	ReasonKernel    = "kernel"    // BLOCKED: a kernel thread waiting (not for I/O)
	ReasonUnknown   = "unknown"   // BLOCKED: the syscall was not seen
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
	reason string
	fdArg  bool // reason depends on the fd's type (read/write-like calls)
}

// syscallsAMD64 lists the x86-64 syscalls threads commonly block in. Others
// block with ReasonSyscall and their number as name.
var syscallsAMD64 = map[int32]sysInfo{
	0:   {"read", ReasonSyscall, true},
	1:   {"write", ReasonSyscall, true},
	7:   {"poll", ReasonNetwork, false},
	17:  {"pread64", ReasonDisk, true},
	18:  {"pwrite64", ReasonDisk, true},
	19:  {"readv", ReasonSyscall, true},
	20:  {"writev", ReasonSyscall, true},
	23:  {"select", ReasonNetwork, false},
	34:  {"pause", ReasonSyscall, false},
	35:  {"nanosleep", ReasonTimer, false},
	42:  {"connect", ReasonNetwork, false},
	43:  {"accept", ReasonNetwork, false},
	44:  {"sendto", ReasonNetwork, false},
	45:  {"recvfrom", ReasonNetwork, false},
	46:  {"sendmsg", ReasonNetwork, false},
	47:  {"recvmsg", ReasonNetwork, false},
	61:  {"wait4", ReasonSyscall, false},
	65:  {"semop", ReasonLock, false},
	72:  {"fcntl", ReasonLock, false},
	73:  {"flock", ReasonLock, false},
	74:  {"fsync", ReasonDisk, false},
	75:  {"fdatasync", ReasonDisk, false},
	76:  {"truncate", ReasonDisk, false},
	77:  {"ftruncate", ReasonDisk, false},
	162: {"sync", ReasonDisk, false},
	202: {"futex", ReasonLock, false},
	220: {"semtimedop", ReasonLock, false},
	208: {"io_getevents", ReasonDisk, false},
	230: {"clock_nanosleep", ReasonTimer, false},
	232: {"epoll_wait", ReasonNetwork, false},
	247: {"waitid", ReasonSyscall, false},
	257: {"openat", ReasonDisk, false},
	270: {"pselect6", ReasonNetwork, false},
	271: {"ppoll", ReasonNetwork, false},
	277: {"sync_file_range", ReasonDisk, false},
	285: {"fallocate", ReasonDisk, false},
	281: {"epoll_pwait", ReasonNetwork, false},
	288: {"accept4", ReasonNetwork, false},
	295: {"preadv", ReasonDisk, true},
	296: {"pwritev", ReasonDisk, true},
	299: {"recvmmsg", ReasonNetwork, false},
	306: {"syncfs", ReasonDisk, false},
	307: {"sendmmsg", ReasonNetwork, false},
	327: {"preadv2", ReasonDisk, true},
	328: {"pwritev2", ReasonDisk, true},
	426: {"io_uring_enter", ReasonSyscall, false},
	441: {"epoll_pwait2", ReasonNetwork, false},
	449: {"futex_waitv", ReasonLock, false},
	455: {"futex_wait", ReasonLock, false},
}

// blockReason maps the switch record of a thread that blocked to a reason
// and the syscall's name ("" outside syscalls). A memory stall (reclaim,
// compaction, thrashing) is "memory" whatever the syscall or fault it
// happened in; io_schedule is "disk" where the syscall says no better.
func blockReason(ev *Event) (reason, syscall string) {
	mem, io := ev.Flags&FlagMemStall != 0, ev.Flags&FlagIOWait != 0
	if ev.Flags&FlagKthread != 0 {
		switch {
		case mem:
			return ReasonMemory, ""
		case io:
			return ReasonDisk, ""
		}
		return ReasonKernel, ""
	}
	switch ev.Syscall {
	case SysNone:
		if mem {
			return ReasonMemory, ""
		}
		return ReasonPageFault, ""
	case SysUnknown:
		switch {
		case mem:
			return ReasonMemory, ""
		case io:
			return ReasonDisk, ""
		}
		return ReasonUnknown, ""
	}
	info, ok := syscallsAMD64[ev.Syscall]
	if !ok {
		info = sysInfo{name: "syscall_" + itoa(int64(ev.Syscall)), reason: ReasonSyscall}
	}
	reason = info.reason
	if info.fdArg {
		switch ev.Detail {
		case fileSock:
			reason = ReasonNetwork
		case fileReg, fileBlk, fileDir:
			reason = ReasonDisk
		case fileFIFO, fileChr:
			reason = ReasonSyscall
		}
	}
	switch {
	case mem:
		reason = ReasonMemory
	case io && (reason == ReasonSyscall || reason == ReasonUnknown):
		reason = ReasonDisk
	}
	return reason, info.name
}

// softirqNames are the softirq vectors (softirq_entry's print fmt).
var softirqNames = [...]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// wakeContext names the context a wakeup ran in: "thread" (an edge from the
// waker thread), "timer", "network", "disk", "hardirq" or "softirq", with a
// detail (softirq vector name, irq number).
func wakeContext(ev *Event) (ctx, detail string) {
	switch ev.Ctx {
	case CtxHrtimer:
		return CtxNameTimer, "hrtimer"
	case CtxBlockIRQ:
		return CtxNameDisk, "irq " + itoa(int64(ev.Detail))
	case CtxHardirq:
		return CtxNameHardirq, "irq " + itoa(int64(ev.Detail))
	case CtxSoftirq:
		name := "vec " + itoa(int64(ev.Detail))
		if int(ev.Detail) < len(softirqNames) {
			name = softirqNames[ev.Detail]
		}
		switch ev.Detail {
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

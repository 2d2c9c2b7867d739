// Package jfr is the JDK Flight Recorder profiler: it keeps a bounded JFR
// recording named "rootline" running inside each HotSpot JVM the agent
// discovers (JFR.start with maxage/maxsize, disk=true) and, on Dump, copies
// a time window of it out with JFR.dump begin=… end=….
//
// A dump yields two artifacts of Kind "jfr":
//
//   - the original recording (MediaType "application/x-jfr", FileName
//     "<service>-<pid>.jfr"), readable by `jfr`, JDK Mission Control and
//     any JFR parser. JFR cuts dumps at chunk boundaries, so this file may
//     cover a little more than the window; Artifact.Start/End say what it
//     really covers.
//   - a pprof conversion (MediaType "application/vnd.google.protobuf+gzip",
//     FileName "<service>-<pid>.pb.gz") holding only the events whose start
//     lies inside the window, one pprof sample per JFR event.
//
// The pprof conversion covers these JFR events, each with its own sample types:
//
//   - jdk.ExecutionSample → "samples"/"count" and "cpu"/"nanoseconds" (the
//     sample count times the recording's jdk.ExecutionSample period, an
//     estimate of on-CPU time of Java code).
//   - jdk.JavaMonitorEnter → "monitor_enter"/"nanoseconds" (time blocked
//     entering a synchronized block or method; only events longer than the
//     settings' threshold, 10 ms with "profile", 20 ms with "default").
//   - jdk.ThreadPark → "thread_park"/"nanoseconds" (time parked in
//     LockSupport.park, i.e. java.util.concurrent locks and conditions; same
//     thresholds).
//
// The lock sample types are present only when the window holds such events.
// Every sample carries the numeric labels "tid" (the OS thread id of the
// Java thread) and "time_ns" (the event's start as Unix nanoseconds), and
// the string label "thread" (the Java thread name).
//
// Not converted (they remain in the .jfr artifact): jdk.NativeMethodSample
// (threads in native code), allocation events (jdk.ObjectAllocationSample,
// jdk.ObjectAllocationInNewTLAB/OutsideTLAB), jdk.ThreadSleep, jdk.JavaMonitorWait,
// I/O events (jdk.SocketRead/Write, jdk.FileRead/Write), exceptions, GC,
// safepoint, compilation, class loading and all periodic statistics events.
// Stacks are JFR's, truncated at its stack depth (64 frames by default).
//
// Attach: diagnostic commands go over the HotSpot attach socket, spoken
// directly (attach.go): a trigger file and SIGQUIT open the JVM's listener,
// which accepts a client with the JVM's effective uid and gid or, from JDK
// 11, root. As the JDK's client does, the socket must be owned by the JVM's
// user with no group or other access (anyone can create files in /tmp); one
// nobody listens on, left by an earlier process with the same pid, is
// replaced. The jcmd tool, which starts a JVM per command, is the fallback
// when the socket cannot be used (the agent neither root nor the JVM's user,
// a JDK 8 JVM of another user, a JVM that does not open its socket) and is
// forced by Config.Attach = "jcmd"; it then runs with the JVM's uid and gid
// (syscall.Credential) when the agent is root. For a JVM of another user,
// dumps go to a DumpDir subdirectory owned by that user, because the JVM
// itself writes the dump file (DumpDir's parents must let that user
// through). A JVM started with -XX:+DisableAttachMechanism cannot be
// recorded (ErrAttachDisabled): the flag is looked for on the command line
// and in JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS and _JAVA_OPTIONS, then in the
// JVM's perfdata (sun.rt.jvmCapabilities, as jcmd does), before any SIGQUIT;
// a JVM hiding it in an @argfile and also running with -XX:-UsePerfData gets
// a SIGQUIT (a thread dump on its stdout), costs a few seconds' wait and a
// generic "attach failed" error.
//
// Containers: a JVM in its own mount namespace is reached through
// /proc/<pid>/root/tmp (its attach socket, trigger and perfdata files, named
// with the pid it sees in its own pid namespace); it writes the dump into
// its own /tmp and the profiler reads it back through /proc/<pid>/root and
// deletes it. With jcmd only, a JVM with its own mount namespace and a
// private /tmp but the agent's pid namespace is refused (ErrNotSupported):
// JDK 17's jcmd then looks for the attach socket in the agent's /tmp and
// would wait 10 s in vain. User namespaces (a container's root mapped to
// another host uid) are not handled.
//
// Signals: the SIGQUIT that opens the attach listener is sent only once the
// JVM handles it (SigCgt in /proc/<pid>/status): a JVM registered as it
// starts is waited for (up to Config.Timeout), one run with -Xrs is refused
// (it would die of the signal).
//
// Other limitations: only HotSpot JVMs with JFR are supported (tested with
// JDK 17 for both jcmd and target; JDK 8u262+ has JFR but other JFR.start
// options and is untested); OpenJ9 is not.
// A recording named "rootline" already running in the JVM is adopted with its
// own settings. The pprof conversion keeps an event only if it starts inside
// the window, so a long monitor or park event that began before the window is
// left out. A dump of a JVM that dies mid-write is returned only as the
// raw .jfr (Partial): JFR writes a chunk's metadata and constant pools last,
// so a cut chunk cannot be converted. JFR's sampler loses samples in some
// tight JIT-compiled loops (seen with -XX:+UseSerialGC on JDK 17: 2 samples
// in 5 s of a busy loop); the "cpu" values then underestimate.
package jfr

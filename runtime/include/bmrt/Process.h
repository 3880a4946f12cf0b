//===- Process.h - set-up of a runtime process ------------------*- C++ -*-===//

#ifndef BMRT_PROCESS_H
#define BMRT_PROCESS_H

namespace bmrt {

/// OpenMP's idle threads spin by default, taking the cores that OpenBLAS's
/// own threads (and a GPU backend's host threads) need next. libgomp reads
/// the policy when it loads, before main: so this sets
/// OMP_WAIT_POLICY=passive and runs the program again (argv: main's),
/// unless the user chose a policy. Call it first thing in main.
void makeIdleThreadsSleep(char **argv);

} // namespace bmrt

#endif // BMRT_PROCESS_H

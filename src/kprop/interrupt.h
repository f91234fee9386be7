// Ctrl-C for a run: the first interrupt asks the runner to stop (keeping the
// best case found so far); a second one exits at once (findings.cpp). Its
// own header so that the transports (external.cpp) can watch for it without
// the runner's.
#pragma once

namespace kprop {

void install_interrupt_handler();
bool interrupted();
void clear_interrupt();  // tests: forget an interrupt that was handled

}  // namespace kprop

/*
 * The pod sandbox's process, as Kubernetes' own pause: holds the pod's namespaces, reaps zombies,
 * exits on SIGINT/SIGTERM. Built statically by scripts/node/build.sh into the image containerd
 * starts every sandbox from (no registry is reachable here to pull registry.k8s.io/pause).
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int signal_number) {
  (void)signal_number;
  _exit(0);
}

static void reap(int signal_number) {
  (void)signal_number;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = quit};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &stop, NULL);
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGCHLD, &child, NULL);
  for (;;) pause();
}

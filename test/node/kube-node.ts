/**
 * A real one-node Kubernetes cluster on this machine, for test/node/ (docs/node.md):
 *
 *   root namespace     etcd + kube-apiserver (harness/k8s/cluster.ts, listening on every address),
 *                      kube-scheduler, kube-controller-manager, the cluster DNS (cluster-dns.ts)
 *   node namespace     a test host (test/k8s/test-hosts.ts: 10.77.<n>.2, peer 10.77.<n>.1) with
 *                      a default route to its peer, running containerd, kubelet and kube-proxy;
 *                      pods on the CNI bridge cni0, 10.78.<n>.0/24, masqueraded when they leave
 *
 * Everything the node changes lives in that namespace (its bridge, its iptables rules, its
 * sysctls) or in a temp dir (containerd's root and state, the pods' network namespaces, kubelet's
 * root, CNI's IP allocations, pod logs), plus one route in the root namespace to the pod network
 * through the node's own veth, which goes when the veth goes. stop() and the exit hooks end the
 * pods, the daemons, the mounts and the namespace; the next start cleans up after a SIGKILLed run.
 *
 * The settings this machine kind needs (cgroup v1/hybrid, a container that cannot set an OOM
 * score of -998, no registry) are in docs/node.md, each with the reason.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { createTestHost, type TestHost } from '../k8s/test-hosts.ts';
import { onExit } from '../../harness/exit-hooks.ts';
import { isAlive } from '../../harness/proc.ts';
import { runBuildScript } from '../../harness/build-script.ts';
import { startClusterDns, type ClusterDns } from './cluster-dns.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const RUNS_DIR = '/run/switchyard-node-runs';
/** The kubernetes Service's ClusterIP in cluster.ts's --service-cluster-ip-range. */
const KUBERNETES_SERVICE_IP = '10.0.0.1';

export interface NodeBuild {
  k8s: string;
  pauseArchive: string;
  pauseImage: string;
  cniBinDir: string;
}

export interface KubeNode {
  cluster: Cluster;
  host: TestHost;
  /** The Node object's name. */
  name: string;
  podCidr: string;
  dns: ClusterDns;
  /** kubectl with the admin kubeconfig. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** `ctr -n k8s.io` against this node's containerd. */
  ctr(args: string[]): Promise<string>;
  /** Imports a docker-archive (podman save --format docker-archive) into the node's containerd. */
  importImage(archive: string): Promise<void>;
  /** Host PID of a container's first process, from its pod's status. */
  containerPid(namespace: string, pod: string, container: string): Promise<number>;
  /** Milliseconds each start-up step took. */
  timings: Record<string, number>;
  /** Last lines of a daemon's log. */
  logs(daemon: Daemon, lines?: number): string;
  stop(): Promise<void>;
}

type Daemon =
  'containerd' | 'kubelet' | 'kube-proxy' | 'kube-scheduler' | 'kube-controller-manager';

interface RunRecord {
  owner: number;
  dir: string;
  processes: { pid: number; exe: string }[];
}

/** Runs scripts/node/build.sh (a no-op once built) and returns what it built. */
export async function buildNode(): Promise<NodeBuild> {
  const script = join(ROOT, 'scripts/node/build.sh');
  const last = await runBuildScript('bash', [script], /^\[(node|k8s)-build\]/);
  if (!last.startsWith('{')) throw new Error(`${script} printed no build record: ${last}`);
  return JSON.parse(last) as NodeBuild;
}

function exeOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return undefined;
  }
}

function cmdlineOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // gone
    }
  }
  return out;
}

function kill(pid: number, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(pid, signal);
  } catch {
    // gone
  }
}

/**
 * Ends what a node left behind in `dir`: its containers (the children of the containerd shims
 * that name this dir's socket), the shims, the recorded daemons, every mount under the dir, the
 * cgroups of its containers, and the dir.
 */
function cleanUpSync(dir: string, processes: { pid: number; exe: string }[]): void {
  for (const { pid, exe } of processes) if (exeOf(pid) === exe) kill(pid);
  const shims = readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((pid) => /containerd-shim/.test(cmdlineOf(pid)) && cmdlineOf(pid).includes(dir));
  for (const shim of shims) for (const child of childrenOf(shim)) kill(child);
  for (const shim of shims) kill(shim);
  // Mounts under the dir, deepest first (pods' volumes, netns bind mounts, overlay rootfs).
  for (let round = 0; round < 5; round++) {
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((line) => line.split(' ')[4] ?? '')
      .filter((mountPoint) => mountPoint.startsWith(dir + '/'))
      .sort((a, b) => b.length - a.length);
    if (mounts.length === 0) break;
    for (const mountPoint of mounts) {
      try {
        execFileSyncQuiet('umount', ['-l', mountPoint]);
      } catch {
        // busy or gone; the next round retries
      }
    }
  }
  rmSync(dir, { recursive: true, force: true });
  removeContainerCgroups();
  // containerd 1.6 keeps its shims' sockets in /run/containerd/s whatever its state dir: once no
  // containerd runs, they are leftovers of killed shims.
  const containerdRuns = readdirSync('/proc').some(
    (e) => /^\d+$/.test(e) && exeOf(Number(e))?.endsWith('/containerd') === true,
  );
  if (!containerdRuns) rmSync('/run/containerd/s', { recursive: true, force: true });
}

/**
 * runc puts the containers' cgroups under `k8s.io` (containerd's namespace) in every hierarchy:
 * removed once empty. Nothing but a test node runs containerd's k8s.io namespace here.
 */
function removeContainerCgroups(): void {
  if (!existsSync('/sys/fs/cgroup')) return;
  // Containers whose shim is already gone (e.g. killed with the node's network namespace) are
  // found by their cgroup.
  for (const hierarchy of ['pids', 'memory', 'unified']) {
    const parent = join('/sys/fs/cgroup', hierarchy, 'k8s.io');
    if (!existsSync(parent)) continue;
    for (const entry of readdirSync(parent, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      try {
        for (const pid of readFileSync(join(parent, entry.name, 'cgroup.procs'), 'utf8').split(
          '\n',
        ))
          if (pid !== '') kill(Number(pid));
      } catch {
        // gone
      }
    }
  }
  for (let round = 0; round < 10; round++) {
    let left = 0;
    for (const hierarchy of readdirSync('/sys/fs/cgroup')) {
      const parent = join('/sys/fs/cgroup', hierarchy, 'k8s.io');
      if (!existsSync(parent)) continue;
      for (const entry of readdirSync(parent, { withFileTypes: true })) {
        if (!entry.isDirectory()) continue;
        try {
          rmdirSync(join(parent, entry.name));
        } catch {
          left++;
        }
      }
      try {
        rmdirSync(parent);
      } catch {
        left++;
      }
    }
    if (left === 0) return;
    // Killed processes leave their cgroups a moment later.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
  }
}

function execFileSyncQuiet(cmd: string, args: string[]): void {
  // A synchronous run for exit hooks (no event loop there).
  const { spawnSync } = process.getBuiltinModule('node:child_process');
  spawnSync(cmd, args, { stdio: 'ignore', timeout: 10_000 });
}

/** Cleans up after runs whose test process is gone (a SIGKILLed run). */
function reapStaleNodes(): void {
  if (!existsSync(RUNS_DIR)) return;
  for (const file of readdirSync(RUNS_DIR)) {
    const path = join(RUNS_DIR, file);
    try {
      const record = JSON.parse(readFileSync(path, 'utf8')) as RunRecord;
      if (isAlive(record.owner)) continue;
      cleanUpSync(record.dir, record.processes);
    } catch {
      // unreadable: drop it
    }
    rmSync(path, { force: true });
  }
}

export async function startKubeNode(): Promise<KubeNode> {
  const timings: Record<string, number> = {};
  const step = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const start = Date.now();
    const result = await fn();
    timings[name] = Date.now() - start;
    return result;
  };

  const build = await step('build', buildNode);
  reapStaleNodes();
  // Registered before the test host's own hook, so the containers end before their network
  // namespace does.
  let cleanUpAtExit = (): void => undefined;
  const removeExitHook = onExit(() => cleanUpAtExit());
  const host = await createTestHost('node');
  const subnet = Number(host.ip.split('.')[2]);
  const podCidr = `10.78.${subnet}.0/24`;
  const name = host.name;
  const netns = `/run/netns/${host.name}`;
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-node-'));
  const daemons = new Map<Daemon, { child: ChildProcess; log: string }>();
  const record = (): void => {
    mkdirSync(RUNS_DIR, { recursive: true });
    const rec: RunRecord = {
      owner: process.pid,
      dir,
      processes: [...daemons.values()].flatMap(({ child }) =>
        child.pid === undefined ? [] : [{ pid: child.pid, exe: exeOf(child.pid) ?? '' }],
      ),
    };
    writeFileSync(join(RUNS_DIR, `${process.pid}-${host.name}.json`), JSON.stringify(rec));
  };
  record();
  let cluster: Cluster | undefined;
  let dns: ClusterDns | undefined;
  cleanUpAtExit = () => {
    cleanUpSync(
      dir,
      [...daemons.values()].flatMap(({ child }) =>
        child.pid === undefined ? [] : [{ pid: child.pid, exe: exeOf(child.pid) ?? '' }],
      ),
    );
    rmSync(join(RUNS_DIR, `${process.pid}-${host.name}.json`), { force: true });
  };

  const launch = (daemon: Daemon, command: string, args: string[], inNode: boolean): void => {
    const log = join(dir, `${daemon}.log`);
    const fd = openSync(log, 'a');
    const child = spawn(
      inNode ? 'nsenter' : command,
      inNode ? [`--net=${netns}`, '--', command, ...args] : args,
      { stdio: ['ignore', fd, fd], detached: false },
    );
    daemons.set(daemon, { child, log });
    record();
  };
  const logs = (daemon: Daemon, lines = 40): string => {
    const d = daemons.get(daemon);
    if (d === undefined) return '';
    return readFileSync(d.log, 'utf8').split('\n').slice(-lines).join('\n');
  };
  const nodeExec = (cmd: string, args: string[]): Promise<{ stdout: string }> =>
    run('nsenter', [`--net=${netns}`, '--', cmd, ...args]);

  const stop = async (): Promise<void> => {
    await dns?.close();
    // kubelet first (it would restart what we stop), then the containers, then the rest.
    const order: Daemon[] = [
      'kubelet',
      'kube-proxy',
      'kube-controller-manager',
      'kube-scheduler',
      'containerd',
    ];
    const shims = readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .map(Number)
      .filter((pid) => /containerd-shim/.test(cmdlineOf(pid)) && cmdlineOf(pid).includes(dir));
    for (const daemon of order) {
      const d = daemons.get(daemon);
      if (d === undefined || d.child.exitCode !== null || d.child.signalCode !== null) continue;
      const exited = new Promise((resolve) => d.child.once('exit', resolve));
      d.child.kill('SIGTERM');
      await Promise.race([exited, sleep(5_000)]);
      d.child.kill('SIGKILL');
      if (daemon === 'kubelet') {
        for (const shim of shims) for (const child of childrenOf(shim)) kill(child);
        for (const shim of shims) kill(shim);
      }
    }
    await cluster?.stop();
    cleanUpSync(dir, []);
    await host.remove();
    rmSync(join(RUNS_DIR, `${process.pid}-${host.name}.json`), { force: true });
    removeExitHook();
  };

  try {
    // The node's network: a default route to the root namespace, forwarding, and the way back
    // to the pod network through the node's veth.
    await nodeExec('ip', ['route', 'add', 'default', 'via', host.peerIp]);
    await nodeExec('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
    await run('ip', ['route', 'add', podCidr, 'via', host.ip, 'dev', host.name]);

    cluster = await step('control plane', () =>
      startCluster({
        // Pods reach the API server through the kubernetes Service, kubelet and kube-proxy from
        // the node's namespace: both at the root namespace's end of the node's veth.
        apiServerArgs: [
          '--bind-address=0.0.0.0',
          `--advertise-address=${host.peerIp}`,
          '--endpoint-reconciler-type=lease',
          // The webhook is called at its Service's endpoints (the pod network is routed here),
          // not its ClusterIP (kube-proxy's rules live in the node's namespace).
          '--enable-aggregator-routing=true',
          // Logs and exec: the kubelet at the node's address (its name resolves nowhere).
          '--kubelet-preferred-address-types=InternalIP',
        ],
        // A controller manager creates ServiceAccounts, so the ServiceAccount admission plugin
        // (the projected API token of every pod) is on.
        dropDefaultArgs: ['--disable-admission-plugins'],
        extraSans: [
          `IP:${host.peerIp}`,
          `IP:${KUBERNETES_SERVICE_IP}`,
          'DNS:kubernetes.default.svc',
        ],
      }),
    );
    const port = new URL(cluster.server).port;
    const nodeKubeconfig = join(dir, 'node.kubeconfig');
    writeFileSync(
      nodeKubeconfig,
      readFileSync(cluster.kubeconfigPath, 'utf8').replace(
        cluster.server,
        `https://${host.peerIp}:${port}`,
      ),
    );
    const bin = (b: string): string => join(build.k8s, b);

    await step('scheduler and controller manager', async () => {
      launch(
        'kube-scheduler',
        bin('kube-scheduler'),
        [`--kubeconfig=${cluster!.kubeconfigPath}`, '--leader-elect=false', '--secure-port=0'],
        false,
      );
      launch(
        'kube-controller-manager',
        bin('kube-controller-manager'),
        [
          `--kubeconfig=${cluster!.kubeconfigPath}`,
          '--leader-elect=false',
          '--secure-port=0',
          `--root-ca-file=${cluster!.caFile}`,
          `--service-account-private-key-file=${join(cluster!.dir, 'sa.key')}`,
          '--use-service-account-credentials=false',
        ],
        false,
      );
      await waitFor(
        'the default ServiceAccount (the controller manager runs)',
        async () =>
          (await cluster!.request('GET', '/api/v1/namespaces/default/serviceaccounts/default'))
            .status === 200,
        { timeoutMs: 60_000 },
      );
    });

    dns = await startClusterDns(cluster, host.peerIp);

    await step('containerd', async () => {
      const cd = join(dir, 'containerd');
      const cni = join(dir, 'cni');
      mkdirSync(join(cni, 'net.d'), { recursive: true });
      writeFileSync(
        join(cni, 'net.d', '10-switchyard.conflist'),
        JSON.stringify({
          cniVersion: '0.4.0',
          name: 'switchyard-node',
          plugins: [
            {
              type: 'bridge',
              bridge: 'cni0',
              isGateway: true,
              ipMasq: true,
              hairpinMode: true,
              ipam: {
                type: 'host-local',
                ranges: [[{ subnet: podCidr }]],
                routes: [{ dst: '0.0.0.0/0' }],
                dataDir: join(cni, 'ipam'),
              },
            },
          ],
        }),
      );
      writeFileSync(
        join(dir, 'containerd.toml'),
        [
          'version = 2',
          `root = "${cd}/root"`,
          `state = "${cd}/state"`,
          '[grpc]',
          `  address = "${cd}/containerd.sock"`,
          '[plugins."io.containerd.grpc.v1.cri"]',
          `  sandbox_image = "${build.pauseImage}"`,
          // This container cannot set the sandbox's OOM score of -998 (runc fails with "can't get
          // final child's PID from pipe"): keep scores at or above containerd's own.
          '  restrict_oom_score_adj = true',
          '  netns_mounts_under_state_dir = true',
          '  [plugins."io.containerd.grpc.v1.cri".containerd]',
          '    snapshotter = "overlayfs"',
          '    default_runtime_name = "runc"',
          '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
          '      runtime_type = "io.containerd.runc.v2"',
          '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
          '        SystemdCgroup = false',
          `        Root = "${cd}/runc"`,
          '  [plugins."io.containerd.grpc.v1.cri".cni]',
          `    bin_dir = "${build.cniBinDir}"`,
          `    conf_dir = "${cni}/net.d"`,
          '[plugins."io.containerd.internal.v1.opt"]',
          `  path = "${cd}/opt"`,
          '',
        ].join('\n'),
      );
      launch('containerd', 'containerd', ['--config', join(dir, 'containerd.toml')], true);
      await waitFor(
        'containerd',
        async () => {
          try {
            await run('ctr', ['--address', `${cd}/containerd.sock`, 'version']);
            return true;
          } catch {
            return false;
          }
        },
        { timeoutMs: 30_000 },
      );
    });
    const ctr = async (args: string[]): Promise<string> =>
      (
        await run(
          'ctr',
          ['--address', join(dir, 'containerd', 'containerd.sock'), '-n', 'k8s.io', ...args],
          {
            maxBuffer: 16 * 1024 * 1024,
          },
        )
      ).stdout;
    const importImage = async (archive: string): Promise<void> => {
      await ctr(['images', 'import', '--no-unpack', archive]);
    };
    await step('pause image', () => importImage(build.pauseArchive));

    await step('kubelet and kube-proxy', async () => {
      const kubeletDir = join(dir, 'kubelet');
      mkdirSync(kubeletDir, { recursive: true });
      writeFileSync(join(dir, 'resolv.conf'), `nameserver ${host.peerIp}\n`);
      writeFileSync(
        join(dir, 'kubelet.yaml'),
        JSON.stringify({
          apiVersion: 'kubelet.config.k8s.io/v1beta1',
          kind: 'KubeletConfiguration',
          containerRuntimeEndpoint: `unix://${join(dir, 'containerd', 'containerd.sock')}`,
          // cgroup v1 (hybrid) here, no systemd: cgroupfs, and no QoS or allocatable cgroups.
          cgroupDriver: 'cgroupfs',
          failCgroupV1: false,
          cgroupsPerQOS: false,
          enforceNodeAllocatable: [],
          failSwapOn: false,
          address: host.ip,
          readOnlyPort: 0,
          healthzBindAddress: '127.0.0.1',
          authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
          authorization: { mode: 'AlwaysAllow' },
          clusterDNS: [host.peerIp],
          clusterDomain: 'cluster.local',
          resolvConf: join(dir, 'resolv.conf'),
          podLogsDir: join(dir, 'pod-logs'),
          // Imported images cannot be pulled again: never collect them. The machine's disk is
          // shared with other work: evict on nothing but a full disk.
          imageGCHighThresholdPercent: 100,
          imageGCLowThresholdPercent: 99,
          evictionHard: {
            'memory.available': '100Mi',
            'nodefs.available': '1%',
            'imagefs.available': '1%',
          },
          serializeImagePulls: false,
          nodeStatusUpdateFrequency: '5s',
          rotateCertificates: false,
        }),
      );
      launch(
        'kubelet',
        bin('kubelet'),
        [
          `--config=${join(dir, 'kubelet.yaml')}`,
          `--kubeconfig=${nodeKubeconfig}`,
          `--hostname-override=${name}`,
          `--node-ip=${host.ip}`,
          `--root-dir=${kubeletDir}`,
          `--cert-dir=${join(kubeletDir, 'pki')}`,
          '--v=1',
        ],
        true,
      );
      writeFileSync(
        join(dir, 'kube-proxy.yaml'),
        JSON.stringify({
          apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
          kind: 'KubeProxyConfiguration',
          clientConnection: { kubeconfig: nodeKubeconfig },
          mode: 'iptables',
          clusterCIDR: podCidr,
          hostnameOverride: name,
          bindAddress: host.ip,
          healthzBindAddress: '127.0.0.1:10256',
          metricsBindAddress: '127.0.0.1:10249',
          // Leave the machine-wide conntrack table size alone (kube-proxy would raise it).
          conntrack: { maxPerCore: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
        }),
      );
      launch('kube-proxy', bin('kube-proxy'), [`--config=${join(dir, 'kube-proxy.yaml')}`], true);
      await waitFor(
        `node ${name} Ready`,
        async () => {
          const res = await cluster!.request<{
            status?: { conditions?: { type: string; status: string }[] };
          }>('GET', `/api/v1/nodes/${name}`);
          return (
            res.status === 200 &&
            (res.body.status?.conditions ?? []).some(
              (c) => c.type === 'Ready' && c.status === 'True',
            )
          );
        },
        { timeoutMs: 120_000 },
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}\nkubelet:\n${logs('kubelet')}`, {
          cause: error,
        });
      });
    });

    const kubectl = async (args: string[], input?: string): Promise<string> => {
      const child = execFile(
        join(build.k8s, 'kubectl'),
        [`--kubeconfig=${cluster!.kubeconfigPath}`, ...args],
        {
          maxBuffer: 64 * 1024 * 1024,
        },
      );
      if (input !== undefined) child.stdin?.end(input);
      else child.stdin?.end();
      return new Promise((resolve, reject) => {
        let stdout = '';
        let stderr = '';
        child.stdout?.on('data', (t: string) => (stdout += t));
        child.stderr?.on('data', (t: string) => (stderr += t));
        child.once('error', reject);
        child.once('close', (code) =>
          code === 0
            ? resolve(stdout)
            : reject(new Error(`kubectl ${args.join(' ')}: exit ${code}: ${stderr || stdout}`)),
        );
      });
    };

    const containerPid = async (
      namespace: string,
      pod: string,
      container: string,
    ): Promise<number> => {
      type Status = { name: string; containerID?: string };
      const res = await cluster!.request<{
        status?: { containerStatuses?: Status[]; initContainerStatuses?: Status[] };
      }>('GET', `/api/v1/namespaces/${namespace}/pods/${pod}`);
      const statuses = [
        ...(res.body.status?.initContainerStatuses ?? []),
        ...(res.body.status?.containerStatuses ?? []),
      ];
      const id = statuses
        .find((s) => s.name === container)
        ?.containerID?.replace(/^containerd:\/\//, '');
      if (id === undefined) throw new Error(`no container ${container} in ${namespace}/${pod}`);
      const tasks = await ctr(['tasks', 'ls']);
      const line = tasks.split('\n').find((l) => l.startsWith(id));
      const pid = Number(line?.split(/\s+/)[1]);
      if (!(pid > 0)) throw new Error(`container ${container} of ${namespace}/${pod} has no task`);
      return pid;
    };

    return {
      cluster,
      host,
      name,
      podCidr,
      dns,
      kubectl,
      ctr,
      importImage,
      containerPid,
      timings,
      logs,
      stop,
    };
  } catch (error) {
    const detail = [...daemons.keys()].map((d) => `--- ${d}:\n${logs(d, 15)}`).join('\n');
    await stop().catch(() => undefined);
    throw new Error(`${(error as Error).message}\n${detail}`, { cause: error });
  }
}

"""``python -m standins.kube start|serve|stop|check --root DIR``: see the package docstring."""
import argparse
import sys
from pathlib import Path

import standins.kube

from .heartbeats import DEFAULT_GRACE_S
from .lifecycle import _stop_cli, answers, serve, spawn
from .network import DEFAULT_LINK_RATE


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m standins.kube", description=standins.kube.__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "serve"):
        command = commands.add_parser(name)
        command.add_argument("--root", required=True, type=Path)
        command.add_argument("--nodes", type=int, default=2)
        command.add_argument("--gpus-per-node", type=int, default=0)
        command.add_argument("--port", type=int, default=0)
        command.add_argument("--no-validate", dest="validate", action="store_false")
        command.add_argument("--pod-network", choices=("vxlan", "none"), default="vxlan",
                             help="vxlan: nodes and pods in network namespaces with a VXLAN overlay (falls back "
                                  "to none, saying why, where namespaces cannot be made); none: every pod on "
                                  "this machine's own stack")
        command.add_argument("--link-rate", default=DEFAULT_LINK_RATE,
                             help="the rate of each node's link, each way (tbf), e.g. 1gbit")
        command.add_argument("--node-grace", type=float, default=DEFAULT_GRACE_S,
                             help="seconds without a heartbeat over a node's link before it is Ready: Unknown "
                                  "(node-monitor-grace-period)")
        command.add_argument("--verbose", action="store_true")
    for name in ("stop", "check"):
        commands.add_parser(name).add_argument("--root", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.root, args.nodes, args.gpus_per_node, args.port, args.validate, args.verbose, args.pod_network,
              args.link_rate, args.node_grace)
        return 0
    if args.command == "start":
        try:
            spawn(args.root, args.nodes, args.gpus_per_node, args.validate, args.port, pod_network=args.pod_network,
                  link_rate=args.link_rate, node_grace_s=args.node_grace)
        except RuntimeError as error:
            print(f"kube stand-in failed to start: {error}", file=sys.stderr)
            return 1
        print(args.root.resolve() / "kubeconfig")
        return 0
    if args.command == "stop":
        return _stop_cli(args.root)
    port_file = args.root / "port"
    ok = port_file.exists() and answers(f"http://127.0.0.1:{int(port_file.read_text())}")
    print("kube stand-in answers" if ok else "kube stand-in does not answer")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

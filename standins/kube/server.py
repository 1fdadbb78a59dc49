"""The stand-in's HTTP API server: discovery documents, routes to the object store, the pod log
endpoint (followed logs in chunks). A whole log (not followed) of a pod on a node behind a link comes
through that node's kubelet port (``heartbeats.KubeletPort``), as a real API server reads it from the
node's kubelet: its bytes cross the node's link, a link that drops stalls them, and after
LOG_RELAY_SILENCE_S of nothing the response is cut short (a node not answering at all is a 500)."""
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .api import GIT_VERSION, ApiError, not_found, parse_label_selector, parse_rfc3339_ns, rfc3339_nano
from .heartbeats import KUBELET_PORT

LOG_RELAY_SILENCE_S = 10.0


def discovery(port):
    resources = [("pods", "Pod", True, ["create", "delete", "deletecollection", "get", "list", "patch"]),
                 ("pods/log", "Pod", True, ["get"]), ("events", "Event", True, ["list"]),
                 ("nodes", "Node", False, ["get", "list"])]
    return {
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
        "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": n, "singularName": "" if "/" in n else k.lower(), "namespaced": ns, "kind": k, "verbs": v}
            for n, k, ns, v in resources]},
        "/version": {"major": "1", "minor": "34", "gitVersion": GIT_VERSION, "gitCommit": "0" * 40,
                     "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                     "goVersion": f"python{sys.version_info[0]}.{sys.version_info[1]}",
                     "compiler": "cpython", "platform": "linux/amd64"},
    }


NS = r"/api/v1/namespaces/(?P<ns>[^/]+)"
ROUTES = [(re.compile(pattern + "$"), name) for pattern, name in [
    (r"/api/v1/nodes", "nodes"), (r"/api/v1/nodes/(?P<name>[^/]+)", "node"),
    (r"/api/v1/pods", "all_pods"), (NS + r"/pods", "pods"), (NS + r"/pods/(?P<name>[^/]+)", "pod"),
    (NS + r"/pods/(?P<name>[^/]+)/status", "pod_status"), (NS + r"/pods/(?P<name>[^/]+)/log", "log"),
    (r"/api/v1/events", "all_events"), (NS + r"/events", "events"),
]]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-standin"

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def _send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method):
        try:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                raise ApiError(400, "BadRequest", "the body of the request could not be decoded as JSON") from None
            self._route(method, url.path.rstrip("/") or "/", query, body)
        except ApiError as error:
            self._send_json(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as error:  # noqa: BLE001  (an internal error is still a Status)
            import traceback
            traceback.print_exc()
            self._send_json(500, ApiError(500, "InternalError", f"stand-in error: {error!r}").status())

    def _route(self, method, path, query, body):
        store, nodes, static = self.server.cluster.store, self.server.cluster.nodes, self.server.discovery
        if path in static:
            return self._send_json(200, static[path]) if method == "GET" else self._not_allowed(method)
        for pattern, name in ROUTES:
            match = pattern.match(path)
            if match:
                route = name
                break
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        args = match.groupdict()
        if query.get("watch", "").lower() in ("true", "1"):
            raise ApiError(405, "MethodNotAllowed", "the stand-in does not serve watch: poll with list instead")
        label, field = query.get("labelSelector"), query.get("fieldSelector")
        grace = query.get("gracePeriodSeconds", (body or {}).get("gracePeriodSeconds") if method == "DELETE" else None)
        if route == "nodes" and method == "GET":
            labels_match = parse_label_selector(label)
            items = [n for n in nodes if labels_match(n["metadata"]["labels"])]
            return self._send_json(200, {"apiVersion": "v1", "kind": "NodeList",
                                         "metadata": {"resourceVersion": "1"}, "items": items})
        if route == "node" and method == "GET":
            for node in nodes:
                if node["metadata"]["name"] == args["name"]:
                    return self._send_json(200, node)
            raise not_found("nodes", args["name"])
        if route == "all_pods" and method == "GET":
            return self._send_json(200, store.list_pods(None, label, field))
        if route == "pods" and method == "GET":
            return self._send_json(200, store.list_pods(args["ns"], label, field))
        if route == "pods" and method == "POST":
            return self._send_json(201, store.create_pod(args["ns"], body, dry_run="dryRun" in query))
        if route == "pods" and method == "DELETE":
            return self._send_json(200, store.delete_pods(args["ns"], label, field, grace))
        if route in ("pod", "pod_status") and method == "GET":
            return self._send_json(200, store.get_pod(args["ns"], args["name"]))
        if route == "pod" and method == "PATCH":
            content_type = self.headers.get("Content-Type", "")
            return self._send_json(200, store.patch_pod(args["ns"], args["name"], body, content_type))
        if route == "pod" and method == "DELETE":
            return self._send_json(200, store.delete_pod(args["ns"], args["name"], grace))
        if route == "log" and method == "GET":
            return self._serve_log(args["ns"], args["name"], query)
        if route in ("events", "all_events") and method == "GET":
            return self._send_json(200, store.list_events(args.get("ns"), field))
        self._not_allowed(method)

    def _not_allowed(self, method):
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                                                f"resource ({method})")

    def _serve_log(self, namespace, name, query):
        store = self.server.cluster.store
        def flag(name):  # the Python client sends True as "True"
            return query.get(name, "").lower() in ("true", "1")
        follow, timestamps = flag("follow"), flag("timestamps")
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            since = (time.time_ns() - int(query["sinceSeconds"]) * 1_000_000_000 if "sinceSeconds" in query
                     else parse_rfc3339_ns(query["sinceTime"]) if "sinceTime" in query else None)
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"invalid log options: {error}") from None

        def render(lines):
            return b"".join((rfc3339_nano(t).encode() + b" " if timestamps else b"") + line for t, line in lines)

        with store.lock:
            pod = store.log_source(namespace, name, query.get("container"), flag("previous"))
            backlog = [entry for entry in pod.log if since is None or entry[0] >= since]
            if tail is not None:
                backlog = backlog[-tail:] if tail > 0 else []
            seen, done = len(pod.log), pod.finished
        if not follow or done:
            data = render(backlog)
            data = data[:limit] if limit is not None else data
            kubelet = self._kubelet(pod, namespace, name, query.get("container") or "base")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if kubelet is None:
                self.wfile.write(data)
            else:
                self._through(kubelet, data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        chunk = render(backlog)
        while True:
            if limit is not None:
                chunk = chunk[:max(0, limit - sent)]
            if chunk:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                sent += len(chunk)
            if done or (limit is not None and sent >= limit):
                break
            with store.lock:
                while len(pod.log) == seen and not pod.finished and not pod.removed and not store.stopping:
                    store.changed.wait(1.0)
                chunk = render(pod.log[seen:])
                seen = len(pod.log)
                done = pod.finished or pod.removed or store.stopping
        self.wfile.write(b"0\r\n\r\n")


    def _kubelet(self, pod, namespace, name, container):
        """A connection to the kubelet port of the pod's node, where its node is behind a link; None
        where it is not. A node that does not answer is the 500 a real API server gives."""
        cluster = self.server.cluster
        node_name = pod.obj["spec"].get("nodeName")  # a pod that ended unscheduled has none
        if cluster.network.kind != "vxlan" or not node_name:
            return None
        node = next(n for n in cluster.nodes if n["metadata"]["name"] == node_name)
        address = node["status"]["addresses"][0]["address"]
        try:
            return socket.create_connection((address, KUBELET_PORT), timeout=LOG_RELAY_SILENCE_S)
        except OSError as error:
            url = f"https://{address}:{KUBELET_PORT}/containerLogs/{namespace}/{name}/{container}"
            raise ApiError(500, "InternalError",
                           f'Get "{url}": dial tcp {address}:{KUBELET_PORT}: {error}') from None

    def _through(self, kubelet, data):
        """``data`` to the kubelet port and back, on to the client as it comes; cut short (the
        connection closed) once LOG_RELAY_SILENCE_S pass with nothing."""
        def send():
            try:
                kubelet.sendall(data)
            except OSError:
                pass

        threading.Thread(target=send, daemon=True).start()
        got = 0
        with kubelet:
            try:
                while got < len(data):
                    chunk = kubelet.recv(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    got += len(chunk)
            except OSError:
                pass
        if got < len(data):
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

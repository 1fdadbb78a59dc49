"""The Kubernetes launcher: one pod per role (``kubernetes_launcher``), the pure pod manifests (``pods``), a run's
pods and one role's pod handle (``role_pods``)."""

"""The Kubernetes launcher: one pod per role (``launcher``), the pure pod manifests (``pods``), a run's
pods and one role's pod handle (``roles``)."""

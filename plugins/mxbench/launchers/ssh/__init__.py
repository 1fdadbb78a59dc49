"""The ssh launcher: the same role plan on SSH hosts (``ssh_launcher``), its pure commands (``commands``),
one role on a host (``remote_role``), staging and fetching files (``transfer``)."""

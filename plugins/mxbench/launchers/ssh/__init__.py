"""The ssh launcher: the same role plan on SSH hosts (``launcher``), its pure commands (``commands``),
one role on a host (``roles``), staging and fetching files (``transfer``)."""

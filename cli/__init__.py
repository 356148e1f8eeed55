"""agentd: a local daemon that runs coding agents for GUI, editor and CLI clients.

The layers install as subpackages and import one way only::

    agentd.protocol  <-  agentd.store  <-  agentd.actors  <-  agentd.supervisor  <-  agentd (the CLI)

This package's own modules are the top layer: the ``agentd`` command
(``main``), the tour (``demo``) and the launcher that starts a daemon as a
child process (``launch``).
"""

__version__ = "0.1.0"

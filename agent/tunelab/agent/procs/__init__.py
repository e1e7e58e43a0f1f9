"""Process supervision, for servers and benchmark jobs alike: the monitor process that owns a
process group (``monitor``), the agent's client of its socket (``monitorclient``, with the peer
check in ``peercheck``), the stop ladder as data (``ladder``), and a process told by pid *and*
create time (``identity``, ``process``, ``identityproof``). Processes are spawned through
``tunelab.common.spawn``. Knows nothing of servers, runs or engines: they build on it."""

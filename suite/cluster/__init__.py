"""An emulated multi-node cluster on one Linux machine (``commbench cluster``).

Each node is a network namespace; each rank has its own shaped NIC (a veth pair) into
one switch namespace whose bridge ports queue and, when shallow, drop. Open MPI launches
across the nodes through an ``nsenter`` agent instead of ssh. :mod:`.plan` is the pure
description (names, addresses, ``tc`` arguments, launch line); :mod:`.netns` does the
``ip``/``tc`` work and keeps the state file; :mod:`.cli` is the command line.
"""

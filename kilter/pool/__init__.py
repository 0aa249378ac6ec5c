"""The global capacity pool: regional kilter instances exchanging capacity inventories peer to peer (issue #22).

``inventory`` is what one region tells the others (its rooms per scale-up
domain, its quota headroom), ``peers`` how the regions keep the latest of
each other's without a leader: the newest generation of each origin wins,
relayed hop by hop, and an inventory past its time to live is not used.
"""

from kilter.pool import inventory, peers
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.peers import PeerTable

__all__ = ["DomainRoom", "PeerTable", "RegionInventory", "inventory", "peers"]

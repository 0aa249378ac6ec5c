"""Fleet lifecycle (issue #23): the controller that moves GPU nodes through ``kilter.dev/lifecycle`` states.

``topology.lifecycle`` decides (health over time, qualification results);
``controller`` watches, writes the labels and the Events, as the leader.
"""

from kilter.lifecycle import controller
from kilter.lifecycle.controller import LifecycleController

__all__ = ["LifecycleController", "controller"]

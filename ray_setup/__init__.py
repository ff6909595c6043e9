"""Ray for this project's drivers, below everything else of ours (it imports nothing of ours):

- `installed`: whether Ray is installed and recent enough, said in one line before anything starts;
- `loopback`: the switch that keeps Ray on 127.0.0.1, and how an address is read;
- `token_folder`: a 0700 folder with a 0600 token, named after its owner process, and the removal of
  those whose owner died (a private Ray's, tools/local_cluster.py's);
- `private`: starting and stopping a private Ray (this user alone, loopback only);
- `joining`: the checks before a driver joins a cluster (its token, the address), and the join;
- `head_watch`: a cluster's head looked at from a thread, its loss an event;
- `nodes`: a node's name for people (its label `name`, else its host and a short id);
- `driver_log`: Ray's own messages to a driver on a cluster, kept in one file of its logs;
- `connection`: `RayConnection`, a driver's one connection to Ray: start or join, the head's watch,
  SIGTERM kept, Ray's patches put back, shutdown;
- `ray_internals`: every private name of Ray this project reads or changes, and what to re-check
  when Ray is upgraded.

Nothing here is re-exported: each name is imported from the module that defines it.
"""

//! ttmesh-monitor: placeholder until its issue lands.

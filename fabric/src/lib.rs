//! ttmesh-fabric: placeholder until its issue lands.

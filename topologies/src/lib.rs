//! ttmesh-topologies: placeholder until its issue lands.

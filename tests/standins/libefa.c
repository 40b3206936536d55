/* A stand-in libefa.so.1: rdma-core's EFA verbs provider present (efa.devices only dlopens it). */
int efadv_query_device(void *ibvctx, void *attr, unsigned int inlen) { return 95; /* EOPNOTSUPP */ }

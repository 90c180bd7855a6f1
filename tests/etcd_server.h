/*
 * etcd_server.h - a real etcd (Debian's etcd-server) for the C tests: started on loopback
 * ports of its own with its data under $PAGEFS_TEST_TMP, stopped and restarted on the same
 * ports with a fresh data directory (an etcd that lost every lease).
 */
#ifndef PAGEFS_TEST_ETCD_SERVER_H
#define PAGEFS_TEST_ETCD_SERVER_H

#include <sys/types.h>

struct etcd_server {
    pid_t pid;         /* 0 when stopped */
    unsigned client_port, peer_port;
    char url[64];      /* http://127.0.0.1:PORT */
    char *dir;         /* data and log (caller clears with etcd_server_clear) */
    unsigned restarts;
};

/* Starts etcd and waits until it answers (at most 20 s). 0, or -1 with a message on stderr
 * (no etcd binary, it did not start). */
int etcd_server_start(struct etcd_server *s, const char *tag);
/* SIGKILL and reap (no-op when stopped). */
void etcd_server_stop(struct etcd_server *s);
/* Starts it again on the same ports with an empty data directory. 0 or -1. */
int etcd_server_restart(struct etcd_server *s);
/* Stops it and removes its directory. */
void etcd_server_clear(struct etcd_server *s);

#endif

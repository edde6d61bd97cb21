/* The cheapest proxy there can be: a TCP relay that reads nothing and decodes nothing.
 *
 * A baseline for bench_relay.py, not part of Herald. Every accepted connection gets a
 * connection to the upstream port and two threads, one per direction, that move bytes with
 * blocking splice(2) through a pipe: no copies into user space, no event loop, and each thread
 * woken by the kernel directly. What a proxy process costs on a machine beyond this is the
 * cost of its own work.
 *
 *     cc -O2 -pthread -o relay relay.c && ./relay LISTEN_PORT UPSTREAM_PORT   (Linux only)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static int upstream_port;

struct direction {
    int from;
    int to;
};

/* Move bytes one way until either side closes, then half-close the other side. */
static void *pump(void *arg)
{
    struct direction *d = arg;
    int pipefd[2];
    if (pipe(pipefd) == 0) {
        fcntl(pipefd[1], F_SETPIPE_SZ, CHUNK);
        for (;;) {
            ssize_t n = splice(d->from, NULL, pipefd[1], NULL, CHUNK, SPLICE_F_MOVE);
            if (n <= 0)
                break;
            while (n > 0) {
                ssize_t m = splice(pipefd[0], NULL, d->to, NULL, (size_t)n, SPLICE_F_MOVE);
                if (m <= 0)
                    goto done;
                n -= m;
            }
        }
done:
        close(pipefd[0]);
        close(pipefd[1]);
    }
    shutdown(d->to, SHUT_WR);
    shutdown(d->from, SHUT_RD);
    return NULL;
}

static int loopback(int fd, int port, int do_bind)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    return do_bind ? bind(fd, (struct sockaddr *)&a, sizeof a)
                   : connect(fd, (struct sockaddr *)&a, sizeof a);
}

static void *serve(void *arg)
{
    int client = (int)(long)arg, one = 1;
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    if (upstream >= 0 && loopback(upstream, upstream_port, 0) == 0) {
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct direction up = {client, upstream}, down = {upstream, client};
        pthread_t thread;
        if (pthread_create(&thread, NULL, pump, &up) == 0) {
            pump(&down);
            pthread_join(thread, NULL);
        }
    }
    if (upstream >= 0)
        close(upstream);
    close(client);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LISTEN_PORT UPSTREAM_PORT\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), one = 1;
    upstream_port = atoi(argv[2]);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listener < 0 || loopback(listener, port, 1) != 0 || listen(listener, 128) != 0) {
        perror("relay: listen");
        return 1;
    }
    printf("relay ready\n");
    fflush(stdout);
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0)
            continue;
        pthread_t thread;
        if (pthread_create(&thread, NULL, serve, (void *)(long)client) == 0)
            pthread_detach(thread);
        else
            close(client);
    }
}

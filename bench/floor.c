/* The least a streaming client can spend per token on this machine: N keep-alive HTTP/1.1 connections
 * to the simulator, each posting a small streaming chat completion and reading the SSE stream with one
 * epoll_wait + recv per wake-up, with no parsing, no timestamps, no records and no request bodies to
 * speak of; the next request goes out when `data: [DONE]` arrives. bench/compare.py runs it beside the
 * two tools and accounts its CPU the same way, so the table shows how far each tool is from the floor.
 *
 *   floor PORT CONNECTIONS SECONDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char BODY[] =
    "{\"model\":\"bench-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],"
    "\"max_tokens\":300,\"stream\":true,\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true}}";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int send_all(int s, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(s, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: floor PORT CONNECTIONS SECONDS\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    double secs = atof(argv[3]);
    char req[1024];
    int reqlen = snprintf(req, sizeof req,
                          "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                          "content-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
                          strlen(BODY), BODY);
    int ep = epoll_create1(0);
    char(*tails)[8] = calloc((size_t)n + 1024, 8);
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons((unsigned short)port);
        a.sin_addr.s_addr = inet_addr("127.0.0.1");
        int one = 1;
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
            perror("floor: connect");
            return 1;
        }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (send_all(s, req, (size_t)reqlen) != 0) return 1;
        struct epoll_event e = {.events = EPOLLIN, .data.fd = s};
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
    }
    static char buf[1 << 16];
    struct epoll_event evs[1024];
    double end = now() + secs;
    while (now() < end) {
        int k = epoll_wait(ep, evs, 1024, 100);
        for (int i = 0; i < k; i++) {
            int s = evs[i].data.fd;
            ssize_t r = recv(s, buf + 8, sizeof buf - 8, 0);
            if (r <= 0) {
                fprintf(stderr, "floor: the server closed a connection\n");
                return 1;
            }
            /* `[DONE]` may straddle two reads: look at the previous read's last bytes too. */
            memcpy(buf, tails[s], 8);
            if (memmem(buf, (size_t)r + 8, "[DONE]", 6)) {
                memset(buf + 8 + r - (r < 8 ? r : 8), 0, r < 8 ? (size_t)r : 8);
                if (send_all(s, req, (size_t)reqlen) != 0) return 1;
            }
            memcpy(tails[s], buf + r, 8);
        }
    }
    return 0;
}

/* Intrusive FIFO queues: a head and a tail pointer to nodes chained through a
 * named member (BSD's STAILQ, without the head struct, so a node keeps the one
 * `next` it shares with the free lists it is on at other times). Not thread
 * safe: the caller holds whatever protects the queue. */
#ifndef SFB_SRC_BASE_FIFO_H
#define SFB_SRC_BASE_FIFO_H

#include <stddef.h>

/* Appends node. */
#define SFB_FIFO_PUSH(head, tail, node, link) \
    do {                                      \
        (node)->link = NULL;                  \
        if (tail)                             \
            (tail)->link = (node);            \
        else                                  \
            (head) = (node);                  \
        (tail) = (node);                      \
    } while (0)

/* Removes the first node (the queue must not be empty). */
#define SFB_FIFO_DROP_HEAD(head, tail, link) \
    do {                                     \
        (head) = (head)->link;               \
        if (!(head)) (tail) = NULL;          \
    } while (0)

/* Appends the chain h2..t2 (NULL h2: nothing). */
#define SFB_FIFO_SPLICE(head, tail, h2, t2, link) \
    do {                                          \
        if (h2) {                                 \
            if (tail)                             \
                (tail)->link = (h2);              \
            else                                  \
                (head) = (h2);                    \
            (tail) = (t2);                        \
        }                                         \
    } while (0)

#endif

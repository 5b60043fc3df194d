/* Topologies (sfb_topo_open / sfb_topo_offsets) with arbitrary P and Q, and
 * routing queries with arbitrary (untrusted) origin and node ids.
 *
 * Input: byte 0 = topology (index into the registry, past the end: an
 * unknown name), bytes 1-4 = nodes, 5-8 = degree (little-endian u32), then
 * pairs of u32 (origin, node) to query. Nodes above 1024 are folded into
 * 1..1024 unless byte 0 bit 7 is set: opening is O(P·Q) and 2^24 nodes of
 * `full` would take minutes per input, while the argument checks need the
 * raw values. On success: offsets distinct, in [1, P−1], out-degree ≤ P−1;
 * neighbor/link_index inverse; the tree from every queried origin is
 * consistent (the parent of a node lists it as a child, hops(parent) + 1 =
 * hops(node)); link_frames sum to P−1; out-of-range ids give UINT32_MAX or
 * no children. */
#include "fuzz.h"

#include <sfb/topo.h>
#include "src/base/bytes.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9) return 0;
    const char *name = sfb_topo_registry_name(data[0] & 0x7f);
    if (!name) name = "no-such-topology";
    uint32_t nodes = sfb__get_u32(data + 1), degree = sfb__get_u32(data + 5);
    int raw = data[0] & 0x80;
    if (!raw && nodes > 1024) nodes = 1 + nodes % 1024;
    if (raw && nodes > 4096 && nodes <= SFB_TOPO_MAX_NODES) return 0; /* too slow */
    data += 9;
    size -= 9;

    uint32_t offs[80], noff = 0;
    int ro = sfb_topo_offsets(name, nodes, degree, offs, 80, &noff);

    struct sfb_topo *t = NULL;
    int r = sfb_topo_open(&t, name, nodes, degree);
    FUZZ_CHECK((r == 0) == (ro == 0));
    if (r) {
        FUZZ_CHECK(t == NULL && r < 0);
        fuzz_note(r);
        return 0;
    }
    FUZZ_CHECK(nodes >= 1 && nodes <= SFB_TOPO_MAX_NODES);
    const uint32_t P = sfb_topo_nodes(t), Q = sfb_topo_out_degree(t);
    FUZZ_CHECK(P == nodes);
    FUZZ_CHECK(Q <= P - 1);
    FUZZ_CHECK(noff == Q);
    FUZZ_CHECK(sfb_topo_offset(t, Q) == 0);
    uint32_t frames = 0;
    for (uint32_t k = 0; k < Q; k++) {
        uint32_t o = sfb_topo_offset(t, k);
        FUZZ_CHECK(o >= 1 && o <= P - 1);
        if (k < 80) FUZZ_CHECK(offs[k] == o);
        for (uint32_t j = 0; j < k && k < 256; j++)
            FUZZ_CHECK(sfb_topo_offset(t, j) != o);
        FUZZ_CHECK(sfb_topo_neighbor(t, 0, k) == o);
        FUZZ_CHECK(sfb_topo_link_index(t, 0, o) == k);
        frames += sfb_topo_link_frames(t, k);
    }
    FUZZ_CHECK(frames == P - 1);
    FUZZ_CHECK(sfb_topo_neighbor(t, P, 0) == UINT32_MAX);
    FUZZ_CHECK(sfb_topo_neighbor(t, 0, Q) == UINT32_MAX);

    uint32_t *kids = malloc(((size_t)Q + 1) * sizeof *kids);
    uint32_t *links = malloc(((size_t)Q + 1) * sizeof *links);
    if (!kids || !links) abort();
    for (size_t q = 0; q + 8 <= size && q < 8 * 64; q += 8) {
        uint32_t origin = sfb__get_u32(data + q), node = sfb__get_u32(data + q + 4);
        /* Half of the queries in range, half raw. */
        if (!(origin & 0x80000000u)) origin %= P, node %= P;
        int in = origin < P && node < P;
        uint32_t nk = sfb_topo_children(t, origin, node, kids);
        uint32_t nl = sfb_topo_forward_links(t, origin, node, links);
        uint32_t par = sfb_topo_parent(t, origin, node);
        uint32_t hops = sfb_topo_hops(t, origin, node);
        FUZZ_CHECK(nk == nl && nk <= Q);
        if (!in) {
            FUZZ_CHECK(nk == 0 && par == UINT32_MAX && hops == UINT32_MAX);
            FUZZ_CHECK(sfb_topo_parent_link(t, origin, node) == UINT32_MAX);
            continue;
        }
        FUZZ_CHECK(hops <= sfb_topo_diameter(t));
        for (uint32_t c = 0; c < nk; c++) {
            FUZZ_CHECK(links[c] < Q && (c == 0 || links[c] > links[c - 1]));
            FUZZ_CHECK(kids[c] == sfb_topo_neighbor(t, node, links[c]));
            FUZZ_CHECK(sfb_topo_parent(t, origin, kids[c]) == node);
            FUZZ_CHECK(sfb_topo_parent_link(t, origin, kids[c]) == links[c]);
            FUZZ_CHECK(sfb_topo_hops(t, origin, kids[c]) == hops + 1);
        }
        if (node == origin) {
            FUZZ_CHECK(par == UINT32_MAX && hops == 0);
        } else {
            FUZZ_CHECK(par < P && hops >= 1);
            FUZZ_CHECK(sfb_topo_hops(t, origin, par) + 1 == hops);
            uint32_t pl = sfb_topo_parent_link(t, origin, node);
            FUZZ_CHECK(pl < Q && sfb_topo_neighbor(t, par, pl) == node);
        }
    }
    free(kids);
    free(links);
    sfb_topo_close(&t);
    FUZZ_CHECK(t == NULL);
    return 0;
}

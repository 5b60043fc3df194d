/* Sufficient-factor batch buffers: growth and release.
 *
 * Capacities in struct sfb_sf count elements (not bytes) so that callers and
 * the codec can compare them with shapes directly; sfb__reserve works in
 * bytes, hence the small wrapper below. */
#include <sfb/sf.h>

#include "src/base/util.h"

#include <stdlib.h>
#include <string.h>

/* Grows an array of `elem`-byte elements to hold `need` elements. */
static int grow(void **buf, size_t *cap_elems, size_t need, size_t elem)
{
    if (need <= *cap_elems && *buf) return 0;
    size_t bytes, cap_bytes;
    if (sfb__mul_size(need, elem, &bytes)) return -EOVERFLOW;
    if (sfb__mul_size(*cap_elems, elem, &cap_bytes)) return -EOVERFLOW;
    int ret = sfb__reserve(buf, &cap_bytes, bytes ? bytes : elem);
    if (ret) return ret;
    *cap_elems = cap_bytes / elem;
    return 0;
}

int sfb_sf_reserve(struct sfb_sf *sf, uint32_t rows, uint32_t cols, uint32_t s, int sparse,
                   uint64_t nnz)
{
    SFB_ENTER();
    SFB_ARG(sf);
    size_t nb, nc;
    if (sfb__mul_size(s, rows, &nb) || sfb__mul_size(s, cols, &nc))
        return sfb__error(-EOVERFLOW, "sf: %u samples of %u × %u overflow size_t", s, rows,
                          cols);
    if (sparse && nnz > UINT32_MAX)
        return sfb__error(-EOVERFLOW, "sf: %llu non-zeros exceed the 2^32 limit of CSR c",
                          (unsigned long long)nnz);
    int ret = grow((void **)&sf->b, &sf->b_cap, nb, sizeof(float));
    if (!ret) {
        if (sparse) {
            ret = grow((void **)&sf->c_row_ptr, &sf->rp_cap, (size_t)s + 1, sizeof(uint32_t));
            /* c_col and c_val share nz_cap: grow both to the same capacity. */
            size_t cap_col = sf->nz_cap, cap_val = sf->nz_cap;
            if (!ret) ret = grow((void **)&sf->c_col, &cap_col, (size_t)nnz, sizeof(uint32_t));
            if (!ret) ret = grow((void **)&sf->c_val, &cap_val, (size_t)nnz, sizeof(float));
            if (!ret) sf->nz_cap = SFB_MIN(cap_col, cap_val);
        } else {
            ret = grow((void **)&sf->c, &sf->c_cap, nc, sizeof(float));
        }
    }
    if (ret) return sfb__error(ret, "sf: cannot allocate %u samples of %u × %u", s, rows, cols);
    sf->rows = rows;
    sf->cols = cols;
    sf->s = s;
    sf->sparse_c = sparse ? 1 : 0;
    if (sparse) sf->c_row_ptr[0] = 0;
    return 0;
}

uint64_t sfb_sf_c_count(const struct sfb_sf *sf)
{
    SFB_ARG_OR(sf, 0);
    if (sf->sparse_c) return sf->c_row_ptr ? sf->c_row_ptr[sf->s] : 0;
    return (uint64_t)sf->s * sf->cols;
}

void sfb_sf_free(struct sfb_sf *sf)
{
    if (!sf) return;
    free(sf->b);
    free(sf->c);
    free(sf->c_row_ptr);
    free(sf->c_col);
    free(sf->c_val);
    memset(sf, 0, sizeof(*sf));
}

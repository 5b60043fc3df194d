/* Image patches for sparse coding (declared in include/sfb/data.h).
 *
 * The subset is Knuth's selection sampling (Algorithm S): one pass over the
 * patch numbers, each taken with probability (still needed)/(still left),
 * which gives exactly max_patches distinct patches in their natural order
 * from one splitmix64 stream — deterministic from the seed, no index array
 * over all n·(h−p+1)·(w−p+1) candidates. */
#include <sfb/data.h>
#include "src/base/util.h"
#include "src/base/rng.h"

#include <math.h>
#include <string.h>

void sfb_patch_default_settings(struct sfb_patch_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_PATCH_SETTINGS_VERSION;
    s->p = 8;
    s->seed = 1;
}

/* Image `i` as dense pixels. */
static int image_row(const struct sfb_dataset *im, uint64_t i, float *out)
{
    if (!im->sparse) {
        memcpy(out, im->x + i * im->d, (size_t)im->d * sizeof(float));
        return 0;
    }
    memset(out, 0, (size_t)im->d * sizeof(float));
    for (uint64_t q = im->row_ptr[i]; q < im->row_ptr[i + 1]; q++) {
        if (im->col[q] >= im->d)
            return sfb__error(-SFB_ESHAPE, "patches: image %llu has pixel %u >= d=%u",
                              (unsigned long long)i, im->col[q], im->d);
        out[im->col[q]] = im->val[q];
    }
    return 0;
}

/* The images' height and width (given, or the side of a square d) and the
 * patch side, checked against the data. */
static int geometry(const struct sfb_dataset *images, const struct sfb_patch_settings *s,
                    uint32_t *hp, uint32_t *wp)
{
    uint32_t h = s->h, w = s->w, p = s->p;
    if ((h == 0) != (w == 0))
        return sfb__error(-EINVAL, "patches: give both image height and width (got h=%u w=%u)", h,
                          w);
    if (h == 0) {
        uint32_t side = (uint32_t)llround(sqrt((double)images->d));
        if ((uint64_t)side * side != images->d)
            return sfb__error(-SFB_ESHAPE,
                              "patches: d=%u is not a square image; give its height and width",
                              images->d);
        h = w = side;
    }
    if ((uint64_t)h * w != images->d)
        return sfb__error(-SFB_ESHAPE, "patches: %u × %u images need d=%llu, data has d=%u", h, w,
                          (unsigned long long)h * w, images->d);
    if (p == 0 || p > h || p > w)
        return sfb__error(-EINVAL, "patches: patch side %u must be in [1, %u]", p, h < w ? h : w);
    if (images->n && (images->sparse ? !images->row_ptr : !images->x))
        return sfb__error(-EINVAL, "patches: images have no pixels");
    *hp = h;
    *wp = w;
    return 0;
}

/* Copies the p×p patch at (r0, c0) of a w-wide image into dst, less its
 * mean when asked. */
static void cut_patch(const float *img, uint32_t w, uint32_t p, uint64_t r0, uint64_t c0,
                      int remove_mean, float *dst)
{
    double mean = 0.0;
    for (uint32_t r = 0; r < p; r++)
        for (uint32_t c = 0; c < p; c++) {
            float v = img[(r0 + r) * w + c0 + c];
            dst[r * p + c] = v;
            mean += v;
        }
    if (remove_mean) {
        float mu = (float)(mean / ((double)p * p));
        for (uint32_t q = 0; q < p * p; q++)
            dst[q] -= mu;
    }
}

int sfb_data_patches(const struct sfb_dataset *images, const struct sfb_patch_settings *s,
                     struct sfb_dataset *out)
{
    SFB_ENTER();
    SFB_ARG(out);
    SFB_ARG(images);
    SFB_ARG(s);
    memset(out, 0, sizeof *out);
    int vr = SFB_CHECK_VERSION(s, "sfb_patch_settings", "sfb_patch_default_settings",
                               SFB_PATCH_SETTINGS_VERSION);
    if (vr) return vr;
    uint32_t h = 0, w = 0, p = s->p;
    int gr = geometry(images, s, &h, &w);
    if (gr) return gr;
    const uint64_t ph = h - p + 1, pw = w - p + 1, per = ph * pw;
    if (images->n > UINT64_MAX / per) return sfb__error(-EOVERFLOW, "patches: too many patches");
    const uint64_t total = images->n * per;
    const uint64_t want = s->max_patches && s->max_patches < total ? s->max_patches : total;
    const uint32_t pd = p * p;
    size_t xbytes, lbytes;
    if (sfb__mul_size(want, pd, &xbytes) || sfb__mul_size(xbytes, sizeof(float), &xbytes) ||
        sfb__mul_size(want, sizeof(int32_t), &lbytes))
        return sfb__error(-EOVERFLOW, "patches: %llu patches of %u pixels overflow",
                          (unsigned long long)want, pd);
    float *img = malloc((size_t)images->d * sizeof(float));
    out->x = malloc(xbytes ? xbytes : 1);
    out->labels = malloc(lbytes ? lbytes : 1);
    if (!img || !out->x || !out->labels) {
        free(img);
        free(out->x);
        free(out->labels);
        memset(out, 0, sizeof *out);
        return sfb__error(-ENOMEM, "patches: cannot allocate %llu patches",
                          (unsigned long long)want);
    }
    uint64_t st = s->seed ^ 0xA54FF53A5F1D36F1ull;
    uint64_t got = 0, cur_img = UINT64_MAX;
    for (uint64_t t = 0; t < total && got < want; t++) {
        if (want < total) {
            /* Take t with probability (want − got)/(total − t). */
            double u = (double)(sfb__splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
            if ((double)(total - t) * u >= (double)(want - got)) continue;
        }
        uint64_t i = t / per, pos = t % per, r0 = pos / pw, c0 = pos % pw;
        if (i != cur_img) {
            int ret = image_row(images, i, img);
            if (ret) {
                free(img);
                free(out->x);
                free(out->labels);
                memset(out, 0, sizeof *out);
                return ret;
            }
            cur_img = i;
        }
        cut_patch(img, w, p, r0, c0, s->remove_mean, out->x + got * pd);
        out->labels[got++] = images->labels ? images->labels[i] : 0;
    }
    free(img);
    out->n = got;
    out->d = pd;
    out->k = images->labels ? images->k : 1;
    return 0;
}

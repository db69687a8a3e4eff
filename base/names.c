/* names.c -- name validation (see names.h). */
#include "base/names.h"

#include <stddef.h>

bool seg_valid_name(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        unsigned char ch = (unsigned char)s[n];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
        if (!ok || n >= SEG_NAME_MAX)
            return false;
    }
    return n > 0;
}

unsigned seg_name_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* lockctl - the command-line client of lockd (placeholder; see issue 15). */
#include <stdio.h>

int main(void)
{
    fputs("lockctl: not built yet\n", stderr);
    return 2;
}

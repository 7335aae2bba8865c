#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  size_t rows=1<<20; // 1M rows of 4 words
  uint64_t *table=malloc(rows*32), *c0=malloc(rows*8),*c1=malloc(rows*8),*c2=malloc(rows*8);
  memset(table,1,rows*32);memset(c0,1,rows*8);memset(c1,1,rows*8);memset(c2,1,rows*8);
  uint64_t *big=malloc(256<<20),*big2=malloc(256<<20); memset(big,1,256<<20); memset(big2,2,256<<20);
  for(int rep=0;rep<5;rep++){
    double t=now(); memcpy(big2,big,256<<20); double m=now()-t;
    t=now();
    for(size_t r=0;r<rows;r++){ uint64_t*row=table+r*4; c0[r]=row[0];c1[r]=row[1];c2[r]=row[2]; row[0]=0;row[1]=0;row[2]=(uint64_t)1<<63;row[3]=0;}
    double h=now()-t;
    t=now(); uint64_t s=0; for(size_t i=0;i<(32<<20)/8;i++) s+=big[i*8 % ((256<<20)/8)]; double rd=now()-t;
    printf("memcpy 256MB: %.1f GB/s (r+w) | hand-on-like 1M rows (read 32MB, reset 32MB, write 24MB): %.2f ms = %.1f GB/s | %lu\n", 2*256/1024.0/m, h*1e3, 88.0/1024/h, (unsigned long)(s&1));
  }
}

/* A fork-per-connection server shaped like rsync's daemon (issue 55, point 3): per
 * connection a forked child writes a 41-byte greeting, reads two lines (the client's greeting
 * and a module name), optionally drops privileges to what it has (setgid, setgroups, setuid,
 * seteuid: four calls glibc broadcasts to every thread of the process), answers "@RSYNCD:
 * OK", reads to the end and says "done". Used by scripts/bench-forked.
 * usage: forkgreet PORT [SETXID]   (prints "ready" once it listens) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static int rdline(int fd,char*b,int cap){int n=0;char c;while(n<cap-1){fd_set r;FD_ZERO(&r);FD_SET(fd,&r);
  struct timeval tv={60,0};if(select(fd+1,&r,0,0,&tv)<=0){if(errno==EINTR)continue;return -1;}
  ssize_t k=read(fd,&c,1);if(k<0&&(errno==EAGAIN||errno==EINTR))continue;if(k<=0)return -1;
  if(c=='\n')break;b[n++]=c;}b[n]=0;return n;}
static void reap(int s){(void)s;int e=errno;while(waitpid(-1,0,WNOHANG)>0);errno=e;}
int main(int argc,char**argv){int port=atoi(argv[1]),setxid=argc>2&&atoi(argv[2]),one=1;
  signal(SIGCHLD,reap);int l=socket(AF_INET,SOCK_STREAM,0);setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,sizeof one);
  struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(INADDR_LOOPBACK)};
  if(bind(l,(void*)&a,sizeof a)||listen(l,128)){perror("listen");return 1;}
  printf("ready\n");fflush(stdout);
  for(;;){int c=accept(l,0,0);if(c<0)continue;
    if(fork()==0){close(l);char b[256];
      fcntl(c,F_SETFL,fcntl(c,F_GETFL)|O_NONBLOCK);
      static const char g[]="@RSYNCD: 31.0 sha512 sha256 sha1 md5 md4\n";
      (void)!write(c,g,sizeof g-1);
      if(rdline(c,b,sizeof b)<0||rdline(c,b,sizeof b)<0)_exit(1);
      if(setxid){gid_t gd=getgid();setgid(gd);setgroups(1,&gd);setuid(getuid());seteuid(geteuid());}
      (void)!write(c,"@RSYNCD: OK\n",12);
      while(rdline(c,b,sizeof b)>0);(void)!write(c,"done\n",5);
      _exit(0);}
    close(c);}}

#!/bin/sh
cd /tmp/rw
gcc -c hello.c -o hello.o
gcc hello.o -o hello
./hello > out.txt
cat out.txt /etc/hostname | sort > out.sorted
mv out.sorted out.final

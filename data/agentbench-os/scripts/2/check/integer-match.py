from sys import argv
print("argv", argv[2])
if int(argv[1]) == int(argv[2]): exit(0)
exit(1)